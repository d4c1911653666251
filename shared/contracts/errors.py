"""Error replies (contract section 1): a closed code, an HTTP-like status, sanitized text."""

from __future__ import annotations

import msgspec


class ErrorDetail(msgspec.Struct):
    code: str
    message: str


class ErrorBody(msgspec.Struct):
    error: ErrorDetail


class ServiceError(Exception):
    """Raised by a handler to answer with an error; `message` must already be sanitized."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(code)
        self.status = status
        self.code = code
        self.message = message


def not_found(message: str = "no such record") -> ServiceError:
    return ServiceError(404, "not_found", message)


def conflict(code: str, message: str) -> ServiceError:
    return ServiceError(409, code, message)


def unavailable(message: str = "a backing store is unavailable; retry later") -> ServiceError:
    return ServiceError(503, "unavailable", message)
