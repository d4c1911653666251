"""Exit codes scripts can rely on, and the failure a command ends with."""

from __future__ import annotations

EXIT_OK = 0
EXIT_CONFLICT = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_FOUND = 3
EXIT_UNAVAILABLE = 4
EXIT_INTERNAL = 5
EXIT_AUTHENTICATION = 6
EXIT_PERMISSION = 7

EXIT_BY_STATUS = {400: EXIT_BAD_INPUT, 404: EXIT_NOT_FOUND, 409: EXIT_CONFLICT, 503: EXIT_UNAVAILABLE}
"""The exit code of an error reply, by its status; any other status is EXIT_INTERNAL."""


class Failure(Exception):
    """A command's failure: an exit code, a closed code, and a message for people."""

    def __init__(self, exit_code: int, code: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.code = code
        self.message = message
        self.status = status
