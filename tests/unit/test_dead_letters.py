"""`walfeed dead`'s pure part: grouping, filters, queue names, replayed headers, pacing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest

from services.cli import dead_letters as dl
from services.consumer import headers
from services.core.topology import Topology

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def _letter(reason: str | None = "malformed: x", type_: str | None = "post.created", dead_ago: float | None = 60,
            body: bytes = b'{"id": "a"}', **more: object) -> dl.Letter:
    hdrs: dict[str, object] = dict(more)
    if reason is not None:
        hdrs[headers.REASON] = reason
    if dead_ago is not None:
        hdrs[headers.DEAD_AT] = int((NOW - timedelta(seconds=dead_ago)).timestamp())
    props = {"message_id": "m1", "timestamp": int((NOW - timedelta(days=2)).timestamp())}
    if type_:
        props["type"] = type_
    return dl.Letter("walfeed.fanout.dead", 1, body, props, hdrs)


def test_reasons_group_without_their_ids_and_numbers() -> None:
    assert dl.reason_group("not in outbox: post.created 0b8f4c1e-2f55-4e0b-9a51-5a0f6f2f8d11 has no visible "
                           "outbox row") == "not in outbox: post.created <id> has no visible outbox row"
    assert dl.reason_group("attempts exhausted: PostMissing: post 42 has author 7, the event says 8") == (
        "attempts exhausted: PostMissing: post <n> has author <n>, the event says <n>")
    assert dl.reason_group("malformed: post.created is not a fan-out event") == (
        "malformed: post.created is not a fan-out event")


def test_groups_count_per_reason_and_type_with_the_oldest_dead_time() -> None:
    letters = [_letter("post 1 missing", dead_ago=10), _letter("post 2 missing", dead_ago=300),
               _letter("post 3 missing", type_="follow.created"), _letter(None, type_=None, dead_ago=None)]
    found = dl.groups(letters)
    assert [(g.reason, g.type, g.count) for g in found] == [
        ("post <n> missing", "post.created", 2), (dl.NO_REASON, dl.NO_TYPE, 1),
        ("post <n> missing", "follow.created", 1)]
    assert found[0].oldest == NOW - timedelta(seconds=300)
    assert found[1].oldest == NOW - timedelta(days=2)  # no dead time: the event's own time, an upper bound
    text = dl.render_groups(found, NOW)
    assert "5m" in text.splitlines()[1] and text.splitlines()[-1] == "4 dead letters"


def test_filters_combine_reason_type_and_since() -> None:
    letter = _letter("Attempts exhausted: boom", dead_ago=600)
    assert dl.Filter(reason="EXHAUSTED").matches(letter)
    assert not dl.Filter(reason="forged").matches(letter)
    assert dl.Filter(type="post.*").matches(letter) and not dl.Filter(type="follow.*").matches(letter)
    assert dl.Filter(since=dl.since("15m", NOW)).matches(letter)
    assert not dl.Filter(since=dl.since("5m", NOW)).matches(letter)
    assert dl.Filter(ids=frozenset({"m1"})).matches(letter) and not dl.Filter(ids=frozenset({"m2"})).matches(letter)
    assert dl.since("2026-06-01T11:00:00Z", NOW) == NOW - timedelta(hours=1)
    with pytest.raises(dl.SelectionError, match="neither a duration"):
        dl.since("last week", NOW)


def test_queues_are_named_with_or_without_the_prefix_and_unknown_ones_are_refused() -> None:
    queues = Topology("wf").dead_letter_queues()
    assert dl.resolve(queues, None, "wf") == list(queues)
    assert dl.resolve(queues, "fanout.dead", "wf") == dl.resolve(queues, "wf.fanout.dead", "wf") == [queues[0]]
    assert queues[0].exchange == "wf.fanout.settle" and queues[0].routing_key == "wf.fanout"
    with pytest.raises(dl.SelectionError, match=r"known: wf\.fanout\.dead"):
        dl.resolve(queues, "wf.fanout", "wf")


def test_a_replayed_copy_starts_a_fresh_budget_and_counts_its_replays() -> None:
    letter = {headers.REASON: "x", headers.ATTEMPTS: 4, headers.ATTEMPT: 4, headers.DEAD_AT: 1, "x-death": [],
              "traceparent": "00-a"}
    assert dl.replay_headers(letter) == {"traceparent": "00-a", headers.REPLAYS: 1}
    assert dl.replay_headers({headers.REPLAYS: 2}) == {headers.REPLAYS: 3}


def test_export_lines_are_json_with_the_body_as_text_or_base64() -> None:
    line = orjson.loads(dl.export_line(_letter(body=b'{"id": "a"}')))
    assert line["body"] == '{"id": "a"}' and line["reason"] == "malformed: x" and line["queue"] == "walfeed.fanout.dead"
    assert orjson.loads(dl.export_line(_letter(body=b"\xff\x00")))["body_base64"] == "/wA="


def test_pace_spaces_messages_at_the_rate_and_zero_is_no_limit() -> None:
    assert dl.Pace(0).wait(1000, 0.0) == 0.0
    assert dl.Pace(10).wait(0, 0.0) == 0.0
    assert dl.Pace(10).wait(5, 0.2) == pytest.approx(0.3)
    assert dl.Pace(10).wait(5, 1.0) == 0.0
