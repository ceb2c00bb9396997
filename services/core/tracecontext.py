"""W3C Trace Context (`traceparent`) values and where walfeed carries them. Pure: strings in, strings out.

A post's trace context travels with its event (docs/adr/0072): the api stores it in the outbox row's
`tracingspancontext` column in the form Debezium's outbox reads (a `java.util.Properties` text holding
`traceparent=...`), the relay copies it into the AMQP message's `traceparent` header, consumers read it there.
Everything here works without OpenTelemetry installed: logs carry the trace id either way.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from typing import Final, NamedTuple

HEADER: Final = "traceparent"  # the HTTP request header and the AMQP message header
COLUMN: Final = "tracingspancontext"  # the outbox column (Debezium's name, `tracing.span.context.field`)
COLUMN_KEY: Final = "traceparent"  # its key in the Properties text

# version 00; a later version may append fields after the flags ("-..."), which a version-00 reader ignores.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16
SAMPLED: Final = 0x01


class TraceParent(NamedTuple):
    trace_id: str  # 32 lowercase hex digits, not all zero
    span_id: str  # 16 lowercase hex digits, not all zero: the parent's span
    flags: int  # trace-flags; bit 0: sampled

    @property
    def header(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags:02x}"

    @property
    def sampled(self) -> bool:
        return bool(self.flags & SAMPLED)


def parse(value: object) -> TraceParent | None:
    """A `traceparent` value, or None when it is not a valid one (the W3C rule: ignore it, start a new trace)."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, str):
        return None
    match = _TRACEPARENT.fullmatch(value.strip())
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest) or trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return TraceParent(trace_id, span_id, int(flags, 16))


def new(sampled: bool = True) -> TraceParent:
    """A new trace: random trace and span ids (unique, not secret: `random` is enough and costs ~1 us)."""
    bits = random.getrandbits
    return TraceParent(f"{bits(128) or 1:032x}", f"{bits(64) or 1:016x}", SAMPLED if sampled else 0)


def to_column(parent: TraceParent) -> str:
    """The outbox column's text: a Properties text Debezium's EventRouter extracts the context from."""
    return f"{COLUMN_KEY}={parent.header}"


def from_column(text: object) -> TraceParent | None:
    """The trace context of an outbox column: `traceparent=...` on a line of a Properties text (comments and other
    keys, as Debezium's writers add them, are skipped), or a bare traceparent. None when there is none valid."""
    if not isinstance(text, str) or not text:
        return None
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and line[0] not in "#!"]
    for line in lines:
        key, sep, value = _split(line)
        if not sep:
            if len(lines) == 1:
                return parse(line)  # a bare traceparent, the text's only line
            continue  # a key without a value, as Properties reads it
        if key == COLUMN_KEY:
            return parse(value)
    return None


_PROPERTY = re.compile(r"([^=:\s]+)\s*([=:\s])\s*(.*)")


def _split(line: str) -> tuple[str, str, str]:
    """key, separator, value of a Properties line (`key=value`, `key: value` or `key value`)."""
    match = _PROPERTY.fullmatch(line)
    if match is None:
        return line, "", ""
    key, sep, value = match.groups()
    return key, sep, value


def from_headers(headers: Mapping[str, object] | None) -> TraceParent | None:
    """The creation context of a received message (its `traceparent` header), or None."""
    if not headers:
        return None
    return parse(headers.get(HEADER))


def trace_id(headers: Mapping[str, object] | None) -> str | None:
    """The trace id of a received message, for its log lines."""
    parent = from_headers(headers)
    return parent.trace_id if parent is not None else None
