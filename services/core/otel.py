"""The OpenTelemetry adapter of the tracing api (services/core/tracing.py), which imports it only in `setup`, when
tracing is configured (the `otel` extra).

Spans are built with explicit times where the work is already over when walfeed knows what it was (a confirm, a
processed batch): no span object lives on the relay's or the worker's hot path, and a batch's links carry each
message's outcome.
"""

from __future__ import annotations

import atexit
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from services.core import tracecontext
from services.core.tracecontext import TraceParent
from services.core.tracing import FAILED, SYSTEM, Received, Sent, Tracing, wall_ns


def span_context(parent: TraceParent) -> SpanContext:
    return SpanContext(trace_id=int(parent.trace_id, 16), span_id=int(parent.span_id, 16), is_remote=True,
                       trace_flags=TraceFlags(parent.flags))


def _as_parent(parent: TraceParent | None) -> otel_context.Context | None:
    if parent is None:
        return otel_context.Context()  # a new trace, whatever is current
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context(parent)))


def traceparent_of(span: trace.Span) -> TraceParent:
    ctx = span.get_span_context()
    return TraceParent(f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}", int(ctx.trace_flags))


class OtelTracing(Tracing):
    enabled = True

    def __init__(self, service: str, provider: TracerProvider | None = None) -> None:
        if provider is None:  # the real one; tests hand in one with an in-memory exporter
            detected = Resource.create()  # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, if set, win
            unnamed = str(detected.attributes.get("service.name", "")).startswith("unknown_service")
            provider = TracerProvider(resource=detected.merge(Resource({"service.name": service})) if unnamed
                                      else detected)
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            atexit.register(provider.shutdown)
        self._provider = provider
        self._tracer = provider.get_tracer("walfeed")
        # Every parent-based sampler (the SDK's default, and each OTEL_TRACES_SAMPLER=parentbased_*) drops the child
        # of a remote parent that was not sampled: such spans are then not even built (10 us an event in the relay,
        # when the api samples a few traces at busy times).
        self._drops_unsampled = "remoteParentNotSampled:AlwaysOffSampler" in provider.sampler.get_description()

    def _dropped(self, parent: TraceParent | None) -> bool:
        return parent is not None and not parent.sampled and self._drops_unsampled

    @contextmanager
    def create(self, exchange: str, incoming: str | None) -> Iterator[str]:
        current = trace.get_current_span()
        parent = (None if current.get_span_context().is_valid
                  else _as_parent(tracecontext.parse(incoming) if incoming else None))
        attributes = {"messaging.system": SYSTEM, "messaging.operation.name": "create",
                      "messaging.operation.type": "create", "messaging.destination.name": exchange}
        with self._tracer.start_as_current_span(f"create {exchange}", context=parent, kind=SpanKind.PRODUCER,
                                                attributes=attributes) as span:
            yield tracecontext.to_column(traceparent_of(span))

    def sent(self, exchange: str, messages: Sequence[Sent], now: float) -> None:
        end = time.time_ns()
        for message in messages:
            parent = tracecontext.parse(message.traceparent) if message.traceparent else None
            if self._dropped(parent):
                continue
            links = [Link(span_context(parent))] if parent is not None else None
            span = self._tracer.start_span(
                f"send {exchange}", context=_as_parent(parent), kind=SpanKind.CLIENT, links=links,
                start_time=wall_ns(message.first_sent, now), attributes={
                    "messaging.system": SYSTEM, "messaging.operation.name": "send",
                    "messaging.operation.type": "send", "messaging.destination.name": exchange,
                    "messaging.rabbitmq.destination.routing_key": message.routing_key,
                    "messaging.message.id": message.message_id})
            span.end(end)

    def processed(self, queue: str, messages: Sequence[Received], started: float, ended: float) -> None:
        now = time.monotonic()
        contexts = [tracecontext.from_headers(m.headers) for m in messages]
        single = len(messages) == 1
        if single and self._dropped(contexts[0]):
            return
        links = [Link(span_context(parent), attributes=_link_attributes(m))
                 for m, parent in zip(messages, contexts, strict=True) if parent is not None]
        attributes: dict[str, Any] = {"messaging.system": SYSTEM, "messaging.operation.name": "process",
                                      "messaging.operation.type": "process", "messaging.destination.name": queue}
        if single:
            attributes.update(_link_attributes(messages[0]))
        else:
            attributes["messaging.batch.message_count"] = len(messages)
        span = self._tracer.start_span(f"process {queue}", context=_as_parent(contexts[0] if single else None),
                                       kind=SpanKind.CONSUMER, links=links, attributes=attributes,
                                       start_time=wall_ns(started, now))
        failed = sum(1 for m in messages if m.outcome in FAILED)
        if failed:
            span.set_status(Status(StatusCode.ERROR, f"{failed} of {len(messages)} messages failed"))
        span.end(wall_ns(ended, now))

    def install(self, app: Any) -> None:
        app.add_middleware(ServerSpans, tracer=self._tracer)  # the last added runs first: around everything

    def shutdown(self) -> None:
        self._provider.shutdown()


def _link_attributes(message: Received) -> dict[str, Any]:
    attributes = {"walfeed.outcome": message.outcome}
    if message.message_id:
        attributes["messaging.message.id"] = message.message_id
    if message.routing_key:
        attributes["messaging.rabbitmq.destination.routing_key"] = message.routing_key
    return attributes


class ServerSpans:
    """ASGI middleware: a SERVER span per HTTP request, a child of the request's `traceparent` when it has a valid
    one, named after the route template (`POST /v1/posts`), current while the request runs (so the outbox write's
    create span is its child)."""

    def __init__(self, app: Any, tracer: trace.Tracer) -> None:
        self.app, self._tracer = app, tracer

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = next((v for k, v in scope["headers"] if k == b"traceparent"), None)
        parent = _as_parent(tracecontext.parse(incoming)) if incoming else None
        method = scope["method"]
        with self._tracer.start_as_current_span(method, context=parent, kind=SpanKind.SERVER, attributes={
                "http.request.method": method, "url.path": scope["path"]}) as span:
            # request.state: for the log line of a 500, written outside this middleware (problems.py)
            scope.setdefault("state", {})["trace_id"] = f"{span.get_span_context().trace_id:032x}"

            async def record(message: Any) -> None:
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        span.set_status(Status(StatusCode.ERROR))
                await send(message)

            try:
                await self.app(scope, receive, record)
            finally:
                route = getattr(scope.get("route"), "path", None)
                if isinstance(route, str):
                    span.set_attribute("http.route", route)
                    span.update_name(f"{method} {route}")
