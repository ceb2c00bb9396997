"""Log lines (services/core/logs.py): `key=value` text or one JSON object per line, with an event's ids."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import orjson
import pytest

from services.core import logs
from services.core.settings import SettingsError

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield io.StringIO()
    root.handlers[:] = handlers
    root.setLevel(level)


def _configure(captured: io.StringIO, fmt: str) -> logging.Logger:
    logs.configure("worker", "INFO", fmt)
    logging.getLogger().handlers[0].setStream(captured)  # type: ignore[attr-defined]
    return logging.getLogger("services.consumer.settler")


def test_json_logs_are_one_object_per_line_with_the_event_and_trace_ids(captured: io.StringIO) -> None:
    log = _configure(captured, "json")
    log.error("dead-lettered", extra={"event_id": "e1", "trace_id": TRACE_ID, "reason": 'bad "payload"\nline 2',
                                      "attempts": 5, "nothing": None})
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("handler failed", extra={"event_id": "e2"})
    lines = captured.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (orjson.loads(line) for line in lines)
    assert {k: first[k] for k in ("level", "process", "logger", "message", "event_id", "trace_id", "attempts")} == {
        "level": "ERROR", "process": "worker", "logger": "services.consumer.settler", "message": "dead-lettered",
        "event_id": "e1", "trace_id": TRACE_ID, "attempts": 5}
    assert first["reason"] == 'bad "payload"\nline 2' and "nothing" not in first
    assert first["time"].endswith("Z")
    assert second["event_id"] == "e2" and "ValueError: boom" in second["exception"]


def test_text_logs_carry_the_same_fields_as_key_value_pairs(captured: io.StringIO) -> None:
    _configure(captured, "text").warning("handler failed", extra={"event_id": "e1", "trace_id": TRACE_ID,
                                                                  "nothing": None})
    line = captured.getvalue().strip()
    assert line.endswith(f"handler failed event_id=e1 trace_id={TRACE_ID}")
    assert " worker WARNING services.consumer.settler: " in line


def test_the_log_format_setting_is_checked_and_named() -> None:
    assert logs.log_format({}) == "text" and logs.log_format({"WALFEED_LOG_FORMAT": "JSON"}) == "json"
    with pytest.raises(SettingsError, match="WALFEED_LOG_FORMAT='xml' is invalid"):
        logs.log_format({"WALFEED_LOG_FORMAT": "xml"})
