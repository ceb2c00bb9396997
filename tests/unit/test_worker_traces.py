"""The consumer's process spans (ADR 0072) on the stand-ins of testkit/broker.py: one span per batch,
linked to each message's creation context with what became of the message, the child of that context when the
batch holds one message, and nothing asked of OpenTelemetry when tracing is off."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pika
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from services.consumer import batched
from services.consumer.session import Session
from services.core import events as ev
from services.core import tracing
from services.core.otel import OtelTracing
from tests.unit.test_worker_consumer import TOPOLOGY, Worker, post


def traceparent(n: int) -> str:
    return f"00-{n:032x}-{n:016x}-01"


class TracedWorker(Worker):
    def __init__(self, traces: tracing.Tracing, **kwargs: int) -> None:
        super().__init__(**kwargs)
        self.traces = traces

    def session(self, then: Sequence[Callable[[], None]] = ()) -> Session:
        super().session(then)  # the stub connection, with its idle steps
        return batched.session(self.conn, TOPOLOGY.fanout, self.processor, self.batches, self.limits, self.stopping,
                               self.traces, large=self.large)

    def publish_traced(self, body: bytes, message_id: str, trace: str | None) -> None:
        props = pika.BasicProperties(message_id=message_id, type=ev.POST_CREATED, content_type="application/json",
                                     delivery_mode=2, headers={"traceparent": trace} if trace else None)
        assert self.broker.publish(TOPOLOGY.grouped_exchange, ev.POST_CREATED, body, props)


def test_a_batch_span_links_every_message_with_its_outcome_and_one_message_is_a_child() -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    w = TracedWorker(OtelTracing("walfeed-worker", provider), batch_size=10, batches=1)
    first, second = post(1), post(2)
    w.publish_traced(ev.encode(first), str(first.id), traceparent(1))  # a batch of its own (the thread is free)
    w.publish_traced(ev.encode(second), str(second.id), traceparent(2))  # these two wait: one batch
    w.publish_traced(b"not json", "poison", traceparent(3))
    w.run()

    alone, batch = sorted(exported.get_finished_spans(), key=lambda s: len(s.links))
    assert alone.name == batch.name == f"process {TOPOLOGY.fanout_queue}"
    assert alone.parent is not None and alone.parent.span_id == 1 and alone.context.trace_id == 1
    assert alone.status.status_code == StatusCode.UNSET
    assert batch.parent is None and batch.attributes is not None
    assert batch.attributes["messaging.batch.message_count"] == 2
    assert [(link.context.trace_id, dict(link.attributes or {})["walfeed.outcome"]) for link in batch.links] == [
        (2, "ack"), (3, "dead")]
    assert batch.status.status_code == StatusCode.ERROR  # the poison message was dead-lettered


def test_without_tracing_the_consumer_asks_nothing_of_opentelemetry() -> None:
    class Refusing(tracing.Tracing):
        def processed(self, queue: str, messages: Sequence[tracing.Received], started: float, ended: float) -> None:
            raise AssertionError("called while tracing is off")

    w = TracedWorker(Refusing(), batch_size=10, batches=1)
    event = post(1)
    w.publish_traced(ev.encode(event), str(event.id), traceparent(1))
    channel = w.run()
    assert channel.acks == [(1, True)]
