"""`walfeed dead` against the real broker: letters written as the worker writes them (services/consumer/settler.py),
read without being consumed, replayed through the settle exchange after confirms, purged, exported."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from datetime import UTC, datetime

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from services.consumer import broker, headers, outcomes
from services.consumer.settler import Settler
from services.core.events import Event, encode
from services.core.topology import Topology
from testkit.waiting import eventually
from tests.integration.ops.conftest import Walfeed, command, depth, drain

pytestmark = pytest.mark.integration


def _letter(channel: BlockingChannel, topology: Topology, event_type: str, reason: str, attempts: int = 4) -> str:
    """A dead letter published exactly as the worker publishes one; returns its message id."""
    payload = ({"post_id": 1, "author_id": 2} if event_type.startswith("post.")
               else {"follower_id": 1, "followee_id": 2})
    event = Event(uuid.uuid4(), event_type, event_type.split(".")[0], "1", datetime(2026, 1, 1, tzinfo=UTC), payload)
    props = pika.BasicProperties(message_id=str(event.id), type=event_type, content_type="application/json",
                                 timestamp=1767225600, delivery_mode=2,
                                 headers={headers.ATTEMPT: attempts})
    dead = outcomes.Dead(reason, attempts)
    assert Settler(channel, broker.EventQueues(topology.fanout), park_ms=0).publish(dead, encode(event), props, {})
    return str(event.id)


def _letters(channel: BlockingChannel, topology: Topology) -> dict[str, list[str]]:
    """Three not-in-outbox post.created letters and two exhausted follow.created ones, ids by type."""
    posts = [_letter(channel, topology, "post.created",
                     f"not in outbox: post.created {uuid.uuid4()} has no visible outbox row") for _ in range(3)]
    follows = [_letter(channel, topology, "follow.created",
                       f"attempts exhausted: PostMissing: post {n} does not exist") for n in (17, 4242)]
    return {"post.created": posts, "follow.created": follows}


def test_ls_groups_by_reason_and_type_and_show_leaves_every_letter_in_place(
        walfeed: Walfeed, channel: BlockingChannel, topology: Topology) -> None:
    ids = _letters(channel, topology)
    ls = walfeed("dead", "ls")
    assert ls.returncode == 0, ls.stderr
    lines = ls.stdout.splitlines()
    posts = next(line for line in lines if "post.created" in line)
    assert "not in outbox: post.created <id> has no visible outbox row" in posts and " 3 " in posts
    follows = next(line for line in lines if "follow.created" in line)
    assert "attempts exhausted: PostMissing: post <n> does not exist" in follows and " 2 " in follows
    assert lines[-1] == "5 dead letters"

    show = walfeed("dead", "show", "--type", "follow.*")
    assert show.returncode == 0, show.stderr
    assert sorted(line.split("message_id=")[1].split()[0] for line in show.stdout.splitlines()
                  if line.startswith("---")) == sorted(ids["follow.created"])
    assert '"x-walfeed-attempts":4' in show.stdout and "x-walfeed-dead-at" in show.stdout
    eventually(lambda: depth(channel, topology.dead_queue) == 5, timeout=10, what="every letter back in place")


def test_filters_select_by_reason_type_since_and_limit(walfeed: Walfeed, channel: BlockingChannel,
                                                       topology: Topology, tmp_path: object) -> None:
    ids = _letters(channel, topology)
    out = walfeed("dead", "export", "--reason", "NOT IN OUTBOX", "--since", "1h")
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    assert sorted(r["message_id"] for r in records) == sorted(ids["post.created"])
    assert {r["type"] for r in records} == {"post.created"}
    assert all(json.loads(r["body"])["id"] == r["message_id"] and r["attempts"] == 4 for r in records)
    assert walfeed("dead", "export", "--since", "2026-01-01T00:00:00Z", "--type", "post.deleted").stdout == ""
    limited = walfeed("dead", "export", "--limit", "2", "--queue", "fanout.dead").stdout.splitlines()
    assert len(limited) == 2
    eventually(lambda: depth(channel, topology.dead_queue) == 5, timeout=10, what="every letter back in place")


def test_replay_sends_the_selected_letters_back_to_their_queue_with_a_fresh_budget(
        walfeed: Walfeed, channel: BlockingChannel, topology: Topology) -> None:
    ids = _letters(channel, topology)
    dry = walfeed("dead", "replay", "--type", "post.created", "--dry-run")
    assert dry.returncode == 0 and "dry run: 3 would be replayed" in dry.stdout
    assert depth(channel, topology.fanout_queue) == 0

    done = walfeed("dead", "replay", "--type", "post.created", "--rate", "100")
    assert done.returncode == 0, done.stderr
    assert "3 of 3 replayed" in done.stderr
    eventually(lambda: depth(channel, topology.fanout_queue) == 3, timeout=10, what="three copies in the fan-out queue")
    replayed = drain(channel, topology.fanout_queue)
    assert sorted(p.message_id for p, _ in replayed) == sorted(ids["post.created"])
    for props, body in replayed:
        assert props.headers == {"x-walfeed-replays": 1}  # reason, attempt counters and dead time dropped
        assert props.type == "post.created" and props.delivery_mode == 2
        assert json.loads(body)["id"] == props.message_id
    eventually(lambda: depth(channel, topology.dead_queue) == 2, timeout=10, what="the two others still dead")
    left = drain(channel, topology.dead_queue)
    assert sorted(p.message_id for p, _ in left) == sorted(ids["follow.created"])


def test_purge_asks_first_and_deletes_only_what_is_selected(walfeed: Walfeed, channel: BlockingChannel,
                                                             topology: Topology) -> None:
    ids = _letters(channel, topology)
    refused = walfeed("dead", "purge", "--reason", "exhausted")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    eventually(lambda: depth(channel, topology.dead_queue) == 5, timeout=10, what="nothing purged without --yes")

    done = walfeed("dead", "purge", "--reason", "exhausted", "--yes")
    assert done.returncode == 0, done.stderr
    assert "2 of the 2 shown purged" in done.stderr
    eventually(lambda: depth(channel, topology.dead_queue) == 3, timeout=10, what="the three not selected")
    left = drain(channel, topology.dead_queue)
    assert sorted(p.message_id for p, _ in left) == sorted(ids["post.created"])


@pytest.mark.parametrize(("args", "message"), [
    (("dead", "ls", "--queue", "walfeed.nope.dead"), "is not a dead queue of walfeed; known:"),
    (("dead", "show", "--since", "yesterday"), "neither a duration"),
    (("dead", "replay", "--limit", "0"), "--limit 0 must be at least 1"),
    (("prune-outbox", "--older-than", "7 days"), "is not a duration"),
])
def test_bad_input_is_a_clear_error_and_a_non_zero_exit(walfeed: Walfeed, args: tuple[str, ...],
                                                         message: str) -> None:
    done = walfeed(*args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_a_replay_killed_midway_loses_nothing_and_duplicates_at_most_what_was_in_flight(
        walfeed_env: dict[str, str], channel: BlockingChannel, topology: Topology) -> None:
    total = 600
    sent = {_letter(channel, topology, "post.created", "not in outbox: forged") for _ in range(total)}
    replay = subprocess.Popen(command("dead", "replay", "--rate", "300"), env={**os.environ, **walfeed_env},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        eventually(lambda: depth(channel, topology.fanout_queue) >= 100, timeout=30, what="a replay under way")
        replay.send_signal(signal.SIGKILL)
    finally:
        replay.wait(10)
    # The broker returns the held letters once it notices the closed connection.
    eventually(lambda: depth(channel, topology.fanout_queue) + depth(channel, topology.dead_queue) >= total,
               timeout=30, what="every letter somewhere")
    replayed, dead = drain(channel, topology.fanout_queue), drain(channel, topology.dead_queue)
    assert 100 <= len(replayed) < total
    found = [p.message_id for p, _ in replayed] + [p.message_id for p, _ in dead]
    assert set(found) == sent  # nothing lost
    duplicates = len(found) - total
    print(f"killed mid-replay: {len(replayed)} replayed, {len(dead)} still dead, {duplicates} duplicated")
    assert duplicates <= 2  # a copy confirmed whose dead letter's ack had not reached the broker


def test_a_copy_no_queue_takes_stops_the_replay_with_the_letter_still_dead(
        walfeed: Walfeed, channel: BlockingChannel, topology: Topology) -> None:
    ids = _letters(channel, topology)
    channel.queue_unbind(topology.fanout_queue, topology.settle_exchange, routing_key=topology.fanout_queue)
    done = walfeed("dead", "replay")
    assert done.returncode == 1 and "no queue took the copy" in done.stderr and "0 of 5 replayed" in done.stderr
    assert "Traceback" not in done.stderr
    eventually(lambda: depth(channel, topology.dead_queue) == 5, timeout=10, what="every letter still dead")
    left = drain(channel, topology.dead_queue)
    assert {p.message_id for p, _ in left} == {*ids["post.created"], *ids["follow.created"]}
