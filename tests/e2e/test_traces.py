"""One post is one connected trace through the three real processes (docs/adr/0072): the api's request span and
its outbox write, the relay's send, the worker's process span, exported over OTLP/HTTP to a receiver this test
runs; and the worker's log lines about the event carry its trace id."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import httpx
import orjson
import pytest

from testkit.otlp import Receiver, Span
from testkit.processes import Processes, free_port
from testkit.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"  # the client's span, as an upstream service would send it


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver().running() as running:
        yield running


def _signup(api: httpx.Client, handle: str) -> tuple[int, dict[str, str]]:
    resp = api.post("/v1/users", json={"handle": handle})
    assert resp.status_code == 201, resp.text
    body = resp.json()
    return body["id"], {"Authorization": f"Bearer {body['token']}"}


def _one(spans: list[Span], name: str) -> Span:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, spans)
    return found[0]


def test_a_post_is_one_trace_from_the_request_through_the_relay_to_the_worker(
        processes: Processes, receiver: Receiver, amqp_prefix: str) -> None:
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    port = free_port()
    api_proc = processes.start("api", "api", "--port", str(port), env=otel)
    relay = processes.start("relay", "relay", env={**otel, "WALFEED_RELAY_METRICS_PORT": "0"})
    worker = processes.start("worker", "worker", env={**otel, "WALFEED_WORKER_METRICS_PORT": "0",
                                                      "WALFEED_LOG_FORMAT": "json", "WALFEED_LOG_LEVEL": "DEBUG"})
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout=30, what="api ready")
    # The api's span names the events exchange; the relay's, the grouped exchange the worker's copy goes to (ADR 0115).
    exchange, grouped, queue = f"{amqp_prefix}.events", f"{amqp_prefix}.events.grouped", f"{amqp_prefix}.fanout"

    with httpx.Client(base_url=base, timeout=10) as api:
        author, author_auth = _signup(api, "author")
        _, follower_auth = _signup(api, "follower")
        assert api.put(f"/v1/following/{author}", headers=follower_auth).status_code == 204
        # The follow's own process span first: the post is then a batch of its own in the worker.
        eventually(lambda: receiver.named(f"process {queue}"), timeout=30, what="the follow processed")

        resp = api.post("/v1/posts", json={"body": "traced"}, headers={
            **author_auth, "traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"})
        assert resp.status_code == 201, resp.text
        post_id = resp.json()["id"]
        eventually(lambda: post_id in [p["id"] for p in api.get("/v1/timeline", headers=follower_auth).json()["items"]],
                   timeout=30, what="the post in the follower's timeline")

    names = ("POST /v1/posts", f"create {exchange}", f"send {grouped}", f"process {queue}")

    def acked(span: Span) -> bool:
        return [link.attributes["walfeed.outcome"] for link in span.links] == ["ack"]

    def whole_trace() -> list[Span] | None:
        spans = receiver.trace(TRACE_ID)
        done = {s.name for s in spans if s.name != names[-1] or acked(s)}
        return spans if done >= set(names) else None

    spans = eventually(whole_trace, timeout=30, what=f"the spans {names} in trace {TRACE_ID}")
    # The worker may see the event before its transaction is visible (docs/adr/0022): it retries, and each try
    # is a process span; the try that applied it is acked.
    tries = [s for s in spans if s.name == names[-1]]
    assert all(not acked(s) for s in tries[:-1]) and acked(tries[-1]), [s.links for s in tries]
    spans = [s for s in spans if s.name != names[-1]] + tries[-1:]
    request, create, send, process = (_one(spans, name) for name in names)
    # api: the request continues the caller's trace; the outbox write is its child and the creation context
    assert (request.service, request.kind, request.parent_span_id) == ("walfeed-api", "SERVER", CALLER_SPAN)
    assert request.attributes["http.route"] == "/v1/posts" and request.attributes["http.response.status_code"] == 201
    assert (create.service, create.kind, create.parent_span_id) == ("walfeed-api", "PRODUCER", request.span_id)
    # relay: continues the stored creation context and links to it; the routing key is the event type
    assert (send.service, send.kind, send.parent_span_id) == ("walfeed-relay", "CLIENT", create.span_id)
    assert [(link.trace_id, link.span_id) for link in send.links] == [(TRACE_ID, create.span_id)]
    assert send.attributes["messaging.system"] == "rabbitmq"
    assert send.attributes["messaging.destination.name"] == grouped
    assert send.attributes["messaging.rabbitmq.destination.routing_key"] == "post.created"
    event_id = send.attributes["messaging.message.id"]
    # worker: a batch of one message is the child of its creation context, and links to it
    assert (process.service, process.kind, process.parent_span_id) == ("walfeed-worker", "CONSUMER", create.span_id)
    assert [(link.trace_id, link.span_id, link.attributes["walfeed.outcome"]) for link in process.links] == [
        (TRACE_ID, create.span_id, "ack")]
    assert process.attributes["messaging.destination.name"] == queue
    assert process.attributes["messaging.message.id"] == event_id

    for proc in (api_proc, relay, worker):
        assert proc.stop(signal.SIGTERM, timeout=30) == 0, proc.log()[-3000:]
    lines = [orjson.loads(line) for line in worker.log().splitlines() if line.startswith("{")]
    applied = [line for line in lines if line.get("event_id") == event_id]
    assert applied and all(line["trace_id"] == TRACE_ID for line in applied), applied
