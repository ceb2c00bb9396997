"""The whole path with the three real processes: API transaction -> WAL -> relay -> RabbitMQ -> worker -> timeline."""

from __future__ import annotations

import functools
import signal
from typing import Any

import httpx
import pika
import psycopg
import pytest

from services.core.topology import Topology
from testkit.infra import Infra
from testkit.processes import Processes, free_port
from testkit.resources import declare_observer, event_ids
from testkit.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def _signup(api: httpx.Client, handle: str) -> tuple[int, dict[str, str]]:
    resp = api.post("/v1/users", json={"handle": handle})
    assert resp.status_code == 201, resp.text
    body = resp.json()
    return body["id"], {"Authorization": f"Bearer {body['token']}"}


def _timeline_ids(api: httpx.Client, auth: dict[str, str]) -> list[int]:
    resp = api.get("/v1/timeline", headers=auth, params={"limit": 100})
    assert resp.status_code == 200, resp.text
    return [item["id"] for item in resp.json()["items"]]


def _shows(api: httpx.Client, auth: dict[str, str], post_id: int) -> bool:
    return post_id in _timeline_ids(api, auth)


def test_a_post_reaches_every_follower_and_the_author_and_no_one_else(processes: Processes) -> None:
    port = free_port()
    api_proc = processes.start("api", "api", "--port", str(port))
    relay = processes.start("relay", "relay")
    worker = processes.start("worker", "worker")
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout=30, what="api ready")

    with httpx.Client(base_url=base, timeout=10) as api:
        author, author_auth = _signup(api, "author")
        followers = [_signup(api, f"follower{i}") for i in range(3)]
        _, stranger_auth = _signup(api, "stranger")
        for _, auth in followers:
            assert api.put(f"/v1/following/{author}", headers=auth).status_code == 204

        resp = api.post("/v1/posts", json={"body": "hello, followers"}, headers=author_auth)
        assert resp.status_code == 201, resp.text
        post_id = resp.json()["id"]

        for _, auth in [*followers, (author, author_auth)]:
            eventually(functools.partial(_shows, api, auth, post_id), timeout=30,
                       what=f"post {post_id} in a follower's timeline")
        # The stranger's timeline is read after every follower's: the event has been fully processed by then.
        assert post_id not in _timeline_ids(api, stranger_auth)
        assert api.get(f"/v1/posts/{post_id}", headers=stranger_auth).json()["body"] == "hello, followers"

    for proc in (api_proc, relay, worker):
        assert proc.stop(signal.SIGTERM, timeout=30) == 0, proc.log()[-3000:]


def test_a_backlog_read_by_a_grouping_relay_is_fanned_out_from_fewer_messages(
        processes: Processes, infra: Infra, topology: Topology, amqp_extra_queues: list[str],
        db: psycopg.Connection[Any]) -> None:
    """The default, WALFEED_RELAY_GROUP_MAX=10 (ADR 0095, 0115): posts written while the relay is down are read
    together when it starts, published to the grouped exchange as groups, and the worker applies every event of
    every group; the events exchange carries each of them alone."""
    observer = declare_observer(infra.amqp_url, topology, "grouped", exchange=topology.grouped_exchange)
    single = declare_observer(infra.amqp_url, topology)
    amqp_extra_queues.extend([observer, single])
    port = free_port()
    api_proc = processes.start("api", "api", "--port", str(port))
    worker = processes.start("worker", "worker")
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout=30, what="api ready")
    with httpx.Client(base_url=base, timeout=10) as api:
        authors = [_signup(api, f"author{i}") for i in range(2)]
        followers = [_signup(api, f"follower{i}") for i in range(3)]
        for _, auth in followers:
            for author, _ in authors:
                assert api.put(f"/v1/following/{author}", headers=auth).status_code == 204
        posts = []
        for i in range(40):  # the relay is not running: its slot keeps them
            resp = api.post("/v1/posts", json={"body": f"post {i}"}, headers=authors[i % 2][1])
            assert resp.status_code == 201, resp.text
            posts.append(resp.json()["id"])
    relay = processes.start("relay", "relay")
    fanned_out = "SELECT count(*) FROM timelines WHERE post_id = ANY(%s)"
    eventually(lambda: db.execute(fanned_out, (posts,)).fetchone() == (40 * 4,), timeout=60,
               what="every post in its author's and its 3 followers' timelines")  # rows only the worker writes
    messages: dict[str, list[int]] = {observer: [], single: []}
    observed: dict[str, list[str]] = {observer: [], single: []}

    def all_observed() -> bool:
        conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
        try:
            channel = conn.channel()
            for queue in (observer, single):
                while (got := channel.basic_get(queue, auto_ack=True))[0] is not None:
                    messages[queue].append(1)
                    observed[queue].extend(event_ids(got[1], got[2]))
        finally:
            conn.close()
        return all(len(ids) >= 40 + 6 for ids in observed.values())

    eventually(all_observed, timeout=30, what="both observers' copy of every event")
    # The posts and the follows, on each exchange (at least once: a republish may repeat one).
    assert len(set(observed[observer])) == len(set(observed[single])) == 40 + 6
    # Some posts went in groups: how many per message depends on what each read of the stream held.
    assert len(messages[observer]) < len(set(observed[observer])), len(messages[observer])
    assert len(messages[single]) == len(observed[single])  # the events exchange: one event a message
    for proc in (api_proc, relay, worker):
        assert proc.stop(signal.SIGTERM, timeout=30) == 0, proc.log()[-3000:]
