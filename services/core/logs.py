"""Logging set-up: one line per record, `key=value` context from `extra=`, greppable by field."""

from __future__ import annotations

import logging
import sys

_STANDARD = set(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = [f"{k}={v}" for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")]
        return f"{line} {' '.join(fields)}" if fields else line


def configure(process: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueFormatter(f"%(asctime)s {process} %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("pika").setLevel(logging.WARNING)
