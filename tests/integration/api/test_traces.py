"""Every outbox row the api writes carries a trace context (docs/adr/0072): the request's `traceparent` when it
is valid, a new trace otherwise; with tracing on, the context of the write's `create` span, a child of the
request's server span. The api in this process on a real socket, its spans in an in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from services.api.app import create_app
from services.core import tracecontext
from services.core.otel import OtelTracing
from services.core.settings import Settings
from testkit.waiting import eventually
from tests.integration.api.conftest import TEST_API, SignUp, serve

pytestmark = pytest.mark.integration

Db = psycopg.Connection[dict[str, Any]]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
INCOMING = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def columns(db: Db) -> list[tuple[str, str | None]]:
    return [(r["type"], r["tracingspancontext"])
            for r in db.execute("SELECT type, tracingspancontext FROM outbox ORDER BY created_at, id").fetchall()]


def test_each_write_stores_the_request_trace_context_or_a_new_one(client: httpx.Client, signup: SignUp,
                                                                  db: Db) -> None:
    alice, bob = signup("alice"), signup("bob")
    traced = {"traceparent": INCOMING}
    assert client.put(f"/v1/following/{bob.id}", headers={**alice.auth, **traced}).status_code == 204
    post = client.post("/v1/posts", json={"body": "hi"}, headers={**bob.auth, **traced}).json()
    assert client.delete(f"/v1/posts/{post['id']}", headers={**bob.auth, "traceparent": "garbage"}).status_code == 204
    assert client.delete(f"/v1/following/{bob.id}", headers=alice.auth).status_code == 204

    stored = columns(db)
    assert [t for t, _ in stored] == ["follow.created", "post.created", "post.deleted", "follow.deleted"]
    assert [c for _, c in stored[:2]] == [f"traceparent={INCOMING}"] * 2  # the caller's context, unchanged
    fresh = [tracecontext.from_column(c) for _, c in stored[2:]]  # an invalid header, no header: new traces
    assert all(p is not None and p.sampled and p.trace_id != TRACE_ID for p in fresh)
    assert fresh[0] != fresh[1]


@pytest.fixture
def exported() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def traced_url(settings: Settings, exported: InMemorySpanExporter) -> Iterator[str]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    with serve(create_app(settings, TEST_API, OtelTracing("walfeed-api", provider))) as url:
        yield url


def test_with_tracing_the_stored_context_is_the_create_span_inside_the_request_span(
        traced_url: str, exported: InMemorySpanExporter, db: Db, amqp_prefix: str) -> None:
    with httpx.Client(base_url=traced_url, timeout=30) as client:
        body = client.post("/v1/users", json={"handle": "carol"}).json()
        reply = client.post("/v1/posts", json={"body": "traced"},
                            headers={"Authorization": f"Bearer {body['token']}", "traceparent": INCOMING})
        assert reply.status_code == 201, reply.text
    names = {"POST /v1/posts", f"create {amqp_prefix}.events"}

    def spans() -> dict[str, ReadableSpan] | None:
        by_name = {s.name: s for s in exported.get_finished_spans() if f"{s.context.trace_id:032x}" == TRACE_ID}
        return by_name if names <= set(by_name) else None

    found = eventually(spans, timeout=10, what="the request's spans")
    request, create = found["POST /v1/posts"], found[f"create {amqp_prefix}.events"]
    assert request.kind == SpanKind.SERVER and request.parent is not None
    assert f"{request.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert request.attributes is not None and request.attributes["http.route"] == "/v1/posts"
    assert request.attributes["http.response.status_code"] == 201
    assert create.kind == SpanKind.PRODUCER and create.parent is not None
    assert create.parent.span_id == request.context.span_id
    ((_, column),) = columns(db)
    assert column == f"traceparent=00-{TRACE_ID}-{create.context.span_id:016x}-01"


@pytest.mark.parametrize("traced", [False, True])
def test_a_500_is_logged_with_the_request_trace_id(traced: bool, request: pytest.FixtureRequest, signup: SignUp,
                                                   db: Db, caplog: pytest.LogCaptureFixture) -> None:
    """Without tracing the caller's trace id, with tracing the server span's (the same trace)."""
    url = request.getfixturevalue("traced_url" if traced else "api_url")
    alice = signup("alice")
    db.execute("ALTER TABLE outbox ADD CONSTRAINT test_reject CHECK (type <> 'post.created') NOT VALID")
    with httpx.Client(base_url=url, timeout=30) as client:
        reply = client.post("/v1/posts", json={"body": "doomed"}, headers={**alice.auth, "traceparent": INCOMING})
    assert reply.status_code == 500
    (record,) = [r for r in caplog.records if r.getMessage() == "unhandled error"]
    assert record.trace_id == TRACE_ID  # type: ignore[attr-defined]
