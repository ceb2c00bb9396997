"""Optional OpenTelemetry spans along an event's path (docs/adr/0072): the tracing api every process uses.

The OpenTelemetry adapter (services/core/otel.py) implements `Tracing` and imports this module; this module imports
the adapter only inside `setup`, by a plain import, when an exporter is configured: the dependency runs one way at
load time. Each process's main.py calls `setup(service)` once and hands the result to its parts. With no exporter
configured (`OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` unset, or `OTEL_SDK_DISABLED=true`)
it is `DISABLED`: OpenTelemetry is not imported and every method returns at once. Configured, spans are exported over
OTLP/HTTP (the `otel` extra: `pip install 'walfeed[otel]'`); the SDK reads its other OTEL_* variables itself.

Spans, after OpenTelemetry's messaging conventions (`messaging.system=rabbitmq`):

- api: `create <exchange>` (PRODUCER) around each outbox write; its context is the message's creation context,
  stored with the row (tracecontext.py). Without tracing the api stores the request's `traceparent`, or a new one.
- relay: `send <exchange>` (CLIENT) per message, from its first publish to the broker's confirm, a child of the
  stored creation context and linked to it. The header itself is the stored context, copied unchanged: a generic
  pika instrumentation would put its own publish span there and cut the api off from the consumers.
- consumers: `process <queue>` (CONSUMER) per batch, linked to every message's creation context, and a child of it
  when the batch holds one message. `Tracing.processed` is the helper every consumer calls (the fan-out worker,
  the notifier). A consumer that writes outbox rows of its own (the notifier's `delivery.*` events) stores
  `create(exchange, the message's traceparent header)` with them: the trace goes on to their consumers.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Final, NamedTuple

from services.core import tracecontext
from services.core.settings import Declared, Env, Flag, OptionalStr, SettingsError, Str
from services.core.tracecontext import TraceParent

SYSTEM: Final = "rabbitmq"
FAILED: Final = frozenset({"retry", "dead"})  # outcomes that mark a process span as failed

# OpenTelemetry's own variables (the SDK reads these and its others itself; walfeed reads these to decide).
ENDPOINT: Final = OptionalStr(
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "base URL of an OTLP/HTTP collector (e.g. `http://127.0.0.1:4318`): set, spans are exported to `<url>/v1/traces`; "
    "set without the `otel` extra installed, the process stops at start naming it", allowed="a URL")
TRACES_ENDPOINT: Final = OptionalStr("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                                     "the same, as the full traces URL; wins over the former", allowed="a URL")
PROTOCOL: Final = Str("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf",
                      "the only protocol walfeed exports with; another one stops the process at start",
                      allowed="`http/protobuf`")
TRACES_PROTOCOL: Final = OptionalStr("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "the same, for traces; wins over the former",
                                     allowed="`http/protobuf`", shown="`OTEL_EXPORTER_OTLP_PROTOCOL`")
SDK_DISABLED: Final = Flag("OTEL_SDK_DISABLED", False, "`true`: no tracing even with an endpoint")
SERVICE_NAME: Final = OptionalStr(  # read by the SDK only
    "OTEL_SERVICE_NAME",
    "the `service.name` of the spans; `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_TRACES_SAMPLER`, "
    "`OTEL_BSP_*` and the SDK's other variables apply as the SDK documents them",
    shown="`walfeed-api`, `walfeed-relay`, `walfeed-worker`")
SETTINGS: Final[tuple[Declared, ...]] = (
    ENDPOINT, TRACES_ENDPOINT, PROTOCOL, TRACES_PROTOCOL, SDK_DISABLED, SERVICE_NAME)
_ENDPOINTS: Final = (TRACES_ENDPOINT.name, ENDPOINT.name)


class Sent(NamedTuple):
    """A message the broker confirmed: what the relay's send span says of it."""

    traceparent: str | None  # the AMQP header, as published
    message_id: str
    routing_key: str
    first_sent: float  # time.monotonic() of its first publish


class Received(NamedTuple):
    """A message a consumer processed, and what became of it (`ack`, `retry`, `dead`, `requeue`, `large`...)."""

    headers: Mapping[str, object] | None
    message_id: str | None
    routing_key: str | None
    outcome: str


class Tracing:
    """No tracing: the methods cost a call. `OtelTracing` is the real one."""

    enabled = False

    def create(self, exchange: str, incoming: str | None) -> AbstractContextManager[str]:
        """Around an outbox write: gives the text of the row's `tracingspancontext` column: the request's
        `traceparent` (`incoming`) when it is valid, else a new trace."""
        parent = tracecontext.parse(incoming) if incoming else None
        return _Given(tracecontext.to_column(parent or tracecontext.new()))

    def sent(self, exchange: str, messages: Sequence[Sent], now: float) -> None:
        """Messages the broker confirmed at `now` (time.monotonic())."""

    def processed(self, queue: str, messages: Sequence[Received], started: float, ended: float) -> None:
        """A batch (or one message) a consumer processed from `queue` between `started` and `ended`
        (time.monotonic())."""

    def install(self, app: Any) -> None:
        """A server span per HTTP request of the (FastAPI) app, when tracing."""

    def shutdown(self) -> None:
        """Export what is buffered (at process exit)."""


class _Given(AbstractContextManager[str]):
    """A context manager that gives a value and does nothing else (cheaper than a @contextmanager generator: the api
    enters one per write)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def __enter__(self) -> str:
        return self._value

    def __exit__(self, *_exc: object) -> None:
        return None


DISABLED: Final = Tracing()


def configured(environ: Mapping[str, str] | None = None) -> bool:
    env = Env(environ)
    if SDK_DISABLED.read(env):
        return False
    return any(env.optional(name) for name in _ENDPOINTS)


def setup(service: str, environ: Mapping[str, str] | None = None) -> Tracing:
    """The process's tracing: DISABLED unless an OTLP endpoint is configured. Raises SettingsError naming the
    variable when one is set and the `otel` extra is not installed, or the protocol is not OTLP/HTTP."""
    if not configured(environ):
        return DISABLED
    env = Env(environ)
    protocol = env.str(TRACES_PROTOCOL.name, PROTOCOL.read(env))
    if protocol != PROTOCOL.default:
        raise SettingsError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported: walfeed exports traces "
                            "over OTLP/HTTP; set it to http/protobuf (the collector's port 4318) or unset it")
    try:
        import services.core.otel as otel  # the adapter (and OpenTelemetry) loaded only now, when configured
    except ImportError as exc:
        variable = next(name for name in _ENDPOINTS if env.optional(name))
        raise SettingsError(f"{variable} is set but OpenTelemetry is not installed ({exc.name}): install walfeed "
                            "with its otel extra (pip install 'walfeed[otel]') or unset it") from None
    return otel.OtelTracing(service)


def wall_ns(moment: float, now: float) -> int:
    """A time.monotonic() moment as nanoseconds since the epoch (what span times are), given monotonic `now`."""
    return time.time_ns() - int((now - moment) * 1e9)


__all__ = ["DISABLED", "Received", "Sent", "TraceParent", "Tracing", "configured", "setup", "wall_ns"]
