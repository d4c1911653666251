"""A page the console cannot show, raised by a page or a form and shown by the middleware."""

from __future__ import annotations


class Failure(Exception):
    """A page that cannot be shown: an HTTP status and a message for people (never upstream text)."""

    def __init__(self, status: int, message: str, next_step: tuple[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.next_step = next_step
        """A link to what to do instead: (address, text)."""
