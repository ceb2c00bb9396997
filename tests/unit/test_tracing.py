"""The spans of services/core/tracing.py (ADR 0072), collected by OpenTelemetry's in-memory exporter, and what
`setup` makes of the OTEL_* settings. OpenTelemetry is the `otel` extra, which the test set-up installs."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import SpanKind, StatusCode

from services.core import tracecontext, tracing
from services.core.otel import OtelTracing
from services.core.settings import SettingsError

STORED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
OTHER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def exported() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def traces(exported: InMemorySpanExporter) -> OtelTracing:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    return OtelTracing("test", provider)


def _trace_id(span: ReadableSpan) -> str:
    return f"{span.context.trace_id:032x}"


def _span_id(span: ReadableSpan) -> str:
    return f"{span.context.span_id:016x}"


def test_without_an_endpoint_nothing_is_traced_and_opentelemetry_is_not_needed() -> None:
    assert tracing.setup("walfeed-test", {}) is tracing.DISABLED
    disabled = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}
    assert tracing.setup("walfeed-test", disabled) is tracing.DISABLED


def test_with_an_endpoint_spans_are_exported_over_otlp() -> None:
    traces = tracing.setup("walfeed-test", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert isinstance(traces, OtelTracing) and traces.enabled
    traces.shutdown()


@pytest.mark.parametrize(("variable", "value", "expected"), [
    (None, None, "walfeed-test"), ("OTEL_SERVICE_NAME", "feed-relay-eu", "feed-relay-eu"),
    ("OTEL_RESOURCE_ATTRIBUTES", "service.name=feed-b,deployment.environment=prod", "feed-b")])
def test_the_service_name_is_the_process_unless_the_otel_variables_name_it(
        monkeypatch: pytest.MonkeyPatch, variable: str | None, value: str | None, expected: str) -> None:
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(name, raising=False)
    if variable is not None and value is not None:
        monkeypatch.setenv(variable, value)
    traces = tracing.setup("walfeed-test", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert isinstance(traces, OtelTracing)
    assert traces._provider.resource.attributes["service.name"] == expected  # what every span is exported with
    traces.shutdown()


def test_the_tracing_api_loads_neither_the_adapter_nor_opentelemetry() -> None:
    """The adapter imports the api, never the other way round at load time: a fresh interpreter that imports the
    api, and builds the disabled tracing from an empty environment, has loaded neither."""
    probe = ("import sys; from services.core import tracing; tracing.setup('walfeed-test', {}); "
             "print(sorted(m for m in sys.modules if m == 'services.core.otel' or m.startswith('opentelemetry')))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert loaded.stdout.strip() == "[]"


def test_an_endpoint_without_the_otel_extra_is_a_startup_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "services.core.otel", None)  # as if OpenTelemetry were not installed
    with pytest.raises(SettingsError, match=r"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set .*walfeed\[otel\]"):
        tracing.setup("walfeed-test", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"})


def test_a_protocol_walfeed_does_not_export_with_is_a_startup_error_naming_it() -> None:
    with pytest.raises(SettingsError, match="OTEL_EXPORTER_OTLP_PROTOCOL='grpc' is not supported"):
        tracing.setup("walfeed-test", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317",
                                       "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})


def test_without_tracing_the_outbox_stores_the_request_context_or_a_new_one() -> None:
    with tracing.DISABLED.create("walfeed.events", STORED) as column:
        assert column == f"traceparent={STORED}"
    for incoming in (None, "garbage"):
        with tracing.DISABLED.create("walfeed.events", incoming) as column:
            parent = tracecontext.from_column(column)
            assert parent is not None and parent.sampled and parent.trace_id != STORED.split("-")[1]


def test_the_api_create_span_continues_the_request_and_is_the_stored_context(
        traces: OtelTracing, exported: InMemorySpanExporter) -> None:
    with traces.create("walfeed.events", STORED) as column:
        pass
    (span,) = exported.get_finished_spans()
    assert span.name == "create walfeed.events" and span.kind == SpanKind.PRODUCER
    assert span.parent is not None and f"{span.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert _trace_id(span) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert column == f"traceparent=00-{_trace_id(span)}-{_span_id(span)}-01"
    assert span.attributes is not None and span.attributes["messaging.system"] == "rabbitmq"
    assert span.attributes["messaging.operation.type"] == "create"


def test_the_relay_send_span_continues_and_links_the_stored_context_and_lasts_until_the_confirm(
        traces: OtelTracing, exported: InMemorySpanExporter) -> None:
    now = time.monotonic()
    traces.sent("walfeed.events", [tracing.Sent(STORED, "e1", "post.created", now - 0.25),
                                   tracing.Sent(None, "e2", "follow.created", now)], now)
    first, second = exported.get_finished_spans()
    assert first.name == "send walfeed.events" and first.kind == SpanKind.CLIENT
    assert _trace_id(first) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert first.parent is not None and f"{first.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert [f"{link.context.span_id:016x}" for link in first.links] == ["00f067aa0ba902b7"]
    assert first.attributes == {"messaging.system": "rabbitmq", "messaging.operation.name": "send",
                                "messaging.operation.type": "send", "messaging.destination.name": "walfeed.events",
                                "messaging.rabbitmq.destination.routing_key": "post.created",
                                "messaging.message.id": "e1"}
    assert first.start_time is not None and first.end_time is not None
    assert 0.2e9 < first.end_time - first.start_time < 1e9
    assert second.parent is None and not second.links  # no stored context: a trace of its own


def test_a_consumer_span_for_one_message_is_its_child(traces: OtelTracing, exported: InMemorySpanExporter) -> None:
    now = time.monotonic()
    traces.processed("walfeed.fanout", [tracing.Received({"traceparent": STORED}, "e1", "post.created", "ack")],
                     now - 0.01, now)
    (span,) = exported.get_finished_spans()
    assert span.name == "process walfeed.fanout" and span.kind == SpanKind.CONSUMER
    assert _trace_id(span) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert [f"{link.context.span_id:016x}" for link in span.links] == ["00f067aa0ba902b7"]
    assert span.attributes is not None and span.attributes["messaging.message.id"] == "e1"
    assert span.attributes["messaging.rabbitmq.destination.routing_key"] == "post.created"
    assert span.status.status_code == StatusCode.UNSET


def test_a_consumer_span_for_a_batch_links_every_message_with_its_outcome(
        traces: OtelTracing, exported: InMemorySpanExporter) -> None:
    now = time.monotonic()
    traces.processed("walfeed.fanout", [
        tracing.Received({"traceparent": STORED}, "e1", "post.created", "ack"),
        tracing.Received({"traceparent": OTHER, "x-walfeed-attempt": 2}, "e2", "follow.created", "dead"),
        tracing.Received(None, "e3", "post.deleted", "ack"),  # no context: nothing to link
    ], now - 0.01, now)
    (span,) = exported.get_finished_spans()
    assert span.parent is None  # a batch has no one parent: links (the messaging conventions)
    assert [(_link_trace(link), dict(link.attributes or {})) for link in span.links] == [
        ("4bf92f3577b34da6a3ce929d0e0e4736", {"walfeed.outcome": "ack", "messaging.message.id": "e1",
                                              "messaging.rabbitmq.destination.routing_key": "post.created"}),
        ("0af7651916cd43dd8448eb211c80319c", {"walfeed.outcome": "dead", "messaging.message.id": "e2",
                                              "messaging.rabbitmq.destination.routing_key": "follow.created"})]
    assert span.attributes is not None and span.attributes["messaging.batch.message_count"] == 3
    assert span.status.status_code == StatusCode.ERROR and span.status.description == "1 of 3 messages failed"


def _link_trace(link: object) -> str:
    return f"{link.context.trace_id:032x}"  # type: ignore[attr-defined]


def test_children_of_unsampled_contexts_are_not_built_under_a_parent_based_sampler(
        traces: OtelTracing, exported: InMemorySpanExporter) -> None:
    unsampled = STORED[:-2] + "00"
    now = time.monotonic()
    traces.sent("walfeed.events", [tracing.Sent(unsampled, "e1", "post.created", now)], now)
    traces.processed("walfeed.fanout", [tracing.Received({"traceparent": unsampled}, "e1", "post.created", "ack")],
                     now, now)
    assert exported.get_finished_spans() == ()


def test_a_sampler_that_ignores_the_parent_still_gets_every_span(exported: InMemorySpanExporter) -> None:
    provider = TracerProvider(sampler=ALWAYS_ON)
    provider.add_span_processor(SimpleSpanProcessor(exported))
    now = time.monotonic()
    OtelTracing("test", provider).sent("walfeed.events", [tracing.Sent(STORED[:-2] + "00", "e1", "t", now)], now)
    assert [s.name for s in exported.get_finished_spans()] == ["send walfeed.events"]
