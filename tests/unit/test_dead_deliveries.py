"""`walfeed dead replay` of the delivery channels' letters, the pure part: which delivery a letter names, which go
back (after their row is made PENDING) and why the others stay dead; the channels' dead queues in the topology."""

from __future__ import annotations

import orjson

from services.cli import dead_deliveries as dd
from services.cli import dead_letters as dl
from services.consumer import headers
from services.core.events import Event, encode
from services.core.topology import Topology
from services.delivery import route


def _body(payload: dict[str, int]) -> bytes:
    return encode(Event.new("delivery.webhook", 7, payload))


def test_every_delivery_channel_has_its_dead_queue_replayed_through_the_delivery_settle_exchange() -> None:
    queues = {q.name: q for q in Topology("wf").dead_letter_queues()}
    for channel in ("webhook", "email"):
        queue = queues[f"wf.deliveries.{channel}.dead"]
        assert (queue.origin, queue.exchange, queue.routing_key, queue.delivery_channel) == (
            f"wf.deliveries.{channel}", "wf.deliveries.settle", f"wf.deliveries.{channel}", channel)
    assert queues["wf.fanout.dead"].delivery_channel is None and queues["wf.notifier.dead"].delivery_channel is None
    assert dl.resolve(list(queues.values()), "deliveries.email.dead", "wf") == [queues["wf.deliveries.email.dead"]]


def test_a_letter_names_its_delivery_or_none() -> None:
    assert dd.delivery_id(_body({"delivery_id": 42})) == 42
    wrong = orjson.loads(_body({"delivery_id": 42}))
    assert dd.delivery_id(orjson.dumps({**wrong, "payload": {"delivery_id": "42"}})) is None
    assert dd.delivery_id(encode(Event.new("post.created", 7, {"post_id": 1, "author_id": 2}))) is None
    assert dd.delivery_id(b"not json") is None


def test_a_delivery_made_pending_by_this_replay_or_left_pending_by_an_interrupted_one_goes_back() -> None:
    assert dd.why_kept(1, dd.Row("DEAD", False, reset=True), set()) is None
    assert dd.why_kept(1, dd.Row("PENDING", False, reset=False), set()) is None
    assert dd.why_kept(1, dd.Row("DEAD", False, reset=False), set(), dry_run=True) is None


def test_a_letter_whose_delivery_cannot_be_made_again_stays_dead_saying_why() -> None:
    assert dd.why_kept(None, None, set()) == "its body names no delivery"
    assert dd.why_kept(1, None, set()) == "no delivery 1 (deleted with its webhook?)"
    assert "was sent back by another letter" in (dd.why_kept(1, dd.Row("DEAD", False, True), {1}) or "")
    assert "webhook is disabled: enable it first" in (dd.why_kept(1, dd.Row("DEAD", True, False), set()) or "")
    assert "is disabled" in (dd.why_kept(1, dd.Row("DEAD", True, False), set(), dry_run=True) or "")
    for status in ("RETRYING", "DELIVERED", "WITHDRAWN"):
        assert dd.why_kept(1, dd.Row(status, False, False), set()) == (
            f"delivery 1 is {status}, no longer DEAD: nothing to replay")


def test_a_replayed_delivery_letter_starts_at_its_first_attempt_due_now() -> None:
    letter = {headers.ATTEMPT: 3, headers.DUE: 1, headers.REASON: "HTTP 400",
              headers.ATTEMPTS: 3, headers.DEAD_AT: 1, headers.PARKED: "x", "traceparent": "00-a"}
    copy = dl.replay_headers(letter)
    assert copy == {"traceparent": "00-a", headers.REPLAYS: 1}
    assert headers.attempt_of(copy) == 1 and route.due_of(copy) == 0 and headers.parked_reason(copy) is None
