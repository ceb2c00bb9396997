"""Logging set-up: one line per record, context from `extra=` as fields, greppable by field.

`WALFEED_LOG_FORMAT` picks the line: `text` (default: the message, then `key=value` fields) or `json` (one JSON
object per line: time, level, process, logger, message, the fields, and the traceback when there is one). Records
about an event carry its `event_id` and, when it has a trace context, its `trace_id` (docs/adr/0072): one grep
finds a post in every process's log. A field whose value is None is left out.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from services.core.settings import Choice, Env

_STANDARD = set(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}
LEVEL: Final = Choice("WALFEED_LOG_LEVEL", "info", ("debug", "info", "warning", "error", "critical"),
                      "log level (`--log-level`)")
FORMAT: Final = Choice(
    "WALFEED_LOG_FORMAT", "text", ("text", "json"),
    "`text`: a line of message then `key=value` fields; `json`: one JSON object per line (`time`, `level`, "
    "`process`, `logger`, `message`, the fields, `exception`). Lines about an event carry `event_id` and, when it has "
    "a trace context, `trace_id`")


def _fields(record: logging.LogRecord) -> Iterator[tuple[str, Any]]:
    for key, value in vars(record).items():
        if key not in _STANDARD and not key.startswith("_") and value is not None:
            yield key, value


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = [f"{k}={v}" for k, v in _fields(record)]
        return f"{line} {' '.join(fields)}" if fields else line


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (a traceback is a field, its newlines escaped)."""

    def __init__(self, process: str) -> None:
        super().__init__()
        self._process = process

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace(
                "+00:00", "Z"),
            "level": record.levelname,
            "process": self._process,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _fields(record):
            line.setdefault(key, value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return orjson.dumps(line, default=repr).decode()


def log_format(environ: Mapping[str, str] | None = None) -> str:
    """WALFEED_LOG_FORMAT, validated (SettingsError names it)."""
    return FORMAT.read(Env(environ))


def log_level(environ: Mapping[str, str] | None = None) -> str:
    """WALFEED_LOG_LEVEL, validated (SettingsError names it), as logging spells it (`INFO`)."""
    return LEVEL.read(Env(environ)).upper()


def configure(process: str, level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(process))
    else:
        handler.setFormatter(KeyValueFormatter(f"%(asctime)s {process} %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("pika").setLevel(logging.WARNING)
