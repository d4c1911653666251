"""Structured JSON logs: one object per line on stderr.

Callers pass closed codes and identifiers as fields; free text from upstream (error messages,
command output) is never logged.
"""

from __future__ import annotations

import logging
import sys
import traceback
from typing import Any

import msgspec

from shared.platform import tracing

_encoder = msgspec.json.Encoder()


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self._service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "service": self._service,
            "event": record.getMessage(),
        }
        ids = tracing.current_ids()  # the work this line is about, when tracing is on
        if ids is not None:
            entry["trace_id"], entry["span_id"] = ids
        fields = getattr(record, "fields", None)
        if fields:
            entry.update(fields)
        if record.exc_info and record.exc_info[0] is not None:
            # The type and the frames, never the message: driver errors can quote upstream text.
            entry["error_type"] = record.exc_info[0].__name__
            entry["stack"] = [
                f"{frame.filename}:{frame.lineno} {frame.name}"
                for frame in traceback.extract_tb(record.exc_info[2])
            ]
        return _encoder.encode(entry).decode()


def setup(service: str, level: str = "INFO") -> None:
    import time

    handler = logging.StreamHandler(sys.stderr)
    formatter = JsonFormatter(service)
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Their messages can quote what a server answered; failures are counted in metrics instead.
    for noisy in ("nats", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)


class Log:
    """A logger whose calls take an event name and keyword fields."""

    def __init__(self, name: str) -> None:
        self._logger = logging.getLogger(name)

    def info(self, event: str, **fields: Any) -> None:
        self._logger.info(event, extra={"fields": fields})

    def warning(self, event: str, **fields: Any) -> None:
        self._logger.warning(event, extra={"fields": fields})

    def error(self, event: str, *, exc: bool = False, **fields: Any) -> None:
        self._logger.error(event, exc_info=exc, extra={"fields": fields})

    def debug(self, event: str, **fields: Any) -> None:
        self._logger.debug(event, extra={"fields": fields})
