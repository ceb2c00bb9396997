"""W3C traceparent values and the outbox column's text (services/core/tracecontext.py): pure."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.core import tracecontext
from services.core.tracecontext import TraceParent

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
HEX = "0123456789abcdef"


def test_a_valid_traceparent_is_read_and_written_back_the_same() -> None:
    parent = tracecontext.parse(VALID)
    assert parent == TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)
    assert parent.header == VALID and parent.sampled


@pytest.mark.parametrize("bad", [
    None, 7, "", "garbage", VALID.upper(), VALID[:-1], VALID + "-extra",  # version 00 has exactly four fields
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero parent id
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # the forbidden version
])
def test_an_invalid_traceparent_is_ignored(bad: object) -> None:
    assert tracecontext.parse(bad) is None


def test_a_later_version_is_read_as_version_00_ignoring_what_it_appends() -> None:
    parent = tracecontext.parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-more")
    assert parent == TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 0)
    assert parent.header.startswith("00-") and not parent.sampled


def test_header_bytes_are_read_too() -> None:
    assert tracecontext.parse(VALID.encode()) == tracecontext.parse(VALID)


@given(st.integers(0, 10))
def test_a_new_trace_is_valid_sampled_and_new_each_time(_: int) -> None:
    first, second = tracecontext.new(), tracecontext.new()
    assert tracecontext.parse(first.header) == first and first.sampled
    assert first.trace_id != second.trace_id
    assert not tracecontext.new(sampled=False).sampled


@given(trace_id=st.text(HEX, min_size=32, max_size=32).filter(lambda t: t.strip("0")),
       span_id=st.text(HEX, min_size=16, max_size=16).filter(lambda s: s.strip("0")), flags=st.integers(0, 255))
def test_the_outbox_column_round_trips(trace_id: str, span_id: str, flags: int) -> None:
    parent = TraceParent(trace_id, span_id, flags)
    column = tracecontext.to_column(parent)
    assert column == f"traceparent={parent.header}"  # a java.util.Properties text, as Debezium's column holds
    assert tracecontext.from_column(column) == parent


@pytest.mark.parametrize(("column", "expected"), [
    (f"#Tue Dec 01 06:00:00 UTC 2026\ntraceparent={VALID}\n", VALID),  # Properties.store() output
    (f"tracestate=vendor=x\ntraceparent : {VALID}", VALID),
    (f"! a comment\ntraceparent {VALID}", VALID),
    (VALID, VALID),  # a bare traceparent
    (f"foo\ntraceparent={VALID}", VALID),  # `foo`: a key without a value, skipped as Properties skips it
    (f"{VALID}\nfoo=bar", None),  # a bare traceparent is a text's only line
    ("tracestate=vendor=x", None), ("traceparent=nonsense", None), ("", None), (None, None), (42, None),
])
def test_the_column_is_read_as_debezium_writes_it(column: object, expected: str | None) -> None:
    parent = tracecontext.from_column(column)
    assert (parent.header if parent else None) == expected


def test_the_trace_id_of_a_message_comes_from_its_traceparent_header() -> None:
    assert tracecontext.trace_id({"traceparent": VALID, "x-walfeed-attempt": 2}) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert tracecontext.trace_id({"traceparent": "bad"}) is None
    assert tracecontext.trace_id(None) is None and tracecontext.trace_id({}) is None
