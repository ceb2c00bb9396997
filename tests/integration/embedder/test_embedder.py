"""`walfeed embedder` as a process, against real Postgres and RabbitMQ, with the stand-in model server of
testkit/embedding_server.py (an Ollama): events published to the grouped exchange as the relay publishes them.
A model failing (HTTP 500, timeout, wrong dimension, refused) acks the message and writes nothing, logged once per
streak; the backfill fills the post later; a killed embedder loses nothing the backfill does not restore."""

from __future__ import annotations

import functools
import signal
import socket
from collections.abc import Iterator, Sequence
from typing import Any

import numpy
import pika
import psycopg
import pytest
from psycopg_pool import ConnectionPool

from services.core import events as ev
from services.core.embedding.protocol import CONNECTION, EmbedderUnavailable, Vectors
from services.core.topology import Topology
from services.embedder import store
from services.embedder.handler import Embedding, Model
from services.embedder.route import EmbedderQueue
from testkit import metrics
from testkit.embedding_server import EmbeddingServer
from testkit.infra import Infra
from testkit.processes import Process, Processes, free_port
from testkit.waiting import eventually

pytestmark = pytest.mark.integration

MODEL = "stand-in"


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    with EmbeddingServer().running() as running:
        yield running


def _env(url: str, port: int) -> dict[str, str]:
    return {"WALFEED_EMBEDDER": "ollama", "WALFEED_EMBEDDER_URL": url, "WALFEED_EMBEDDER_MODEL": MODEL,
            "WALFEED_EMBEDDER_TIMEOUT": "0.5", "WALFEED_EMBED_IDLE_SECONDS": "0.2",
            "WALFEED_EMBED_SETTLE_SECONDS": "0", "WALFEED_EMBEDDER_METRICS_PORT": str(port)}


def _start(processes: Processes, url: str, name: str = "embedder") -> tuple[Process, str]:
    port = free_port()
    proc = processes.start(name, "embedder", env=_env(url, port))
    eventually(lambda: "consuming" in proc.log(), timeout=60, what="the embedder consuming")
    return proc, f"http://127.0.0.1:{port}/metrics"


def _posts(database_url: str, bodies: list[str]) -> list[int]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        author = conn.execute("INSERT INTO users (handle, token_hash) VALUES ('writer', 'x') "
                              "ON CONFLICT (handle) DO UPDATE SET handle = excluded.handle RETURNING id").fetchone()
        assert author is not None
        return [int(conn.execute("INSERT INTO posts (author_id, body) VALUES (%s, %s) RETURNING id",
                                 (author[0], body)).fetchone()[0]) for body in bodies]  # type: ignore[index]


def _publish(infra: Infra, topology: Topology, kind: str, posts: list[int]) -> None:
    """The posts' events on the grouped exchange, one message each, as the relay publishes them."""
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:
        channel = conn.channel()
        channel.confirm_delivery()
        for post in posts:
            event = ev.Event.new(kind, post, {"post_id": post, "author_id": 1})
            channel.basic_publish(topology.grouped_exchange, kind, ev.encode(event), pika.BasicProperties(
                message_id=str(event.id), type=kind, content_type=ev.CONTENT_TYPE, delivery_mode=2), mandatory=True)
    finally:
        conn.close()


def _queued(infra: Infra, topology: Topology) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:
        ok = conn.channel().queue_declare(topology.embedder_queue, passive=True).method
        return int(ok.message_count)
    finally:
        conn.close()


def _vectors(database_url: str) -> dict[int, int]:
    """post id -> dimension of its live vector, of the stand-in model."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        return {r[0]: r[1] for r in conn.execute("SELECT post_id, dimension FROM post_embeddings WHERE model = %s "
                                                 "AND vector IS NOT NULL", (f"ollama:{MODEL}",))}


def _failures(url: str, kind: str) -> float:
    return sum(v for labels, v in metrics.labelled(metrics.scrape(url), "walfeed_embedder_failures_total")
               if labels.get("kind") == kind)


def test_a_post_gets_its_vector_and_a_deleted_post_its_tombstone(
        processes: Processes, server: EmbeddingServer, infra: Infra, topology: Topology, database_url: str) -> None:
    embedder, _ = _start(processes, server.url)
    first, second = _posts(database_url, ["one post", "another post"])
    _publish(infra, topology, ev.POST_CREATED, [first, second])
    eventually(lambda: _vectors(database_url) == {first: 8, second: 8}, timeout=30, what="both vectors")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE posts SET deleted_at = now() WHERE id = %s", (second,))
    _publish(infra, topology, ev.POST_DELETED, [second])
    eventually(lambda: _vectors(database_url) == {first: 8}, timeout=30, what="the deleted post's tombstone")
    assert embedder.stop(signal.SIGTERM, timeout=30) == 0, embedder.log()[-3000:]


@pytest.mark.parametrize("failure", ["error", "slow", "dimension", "refused"])
def test_a_failing_model_acks_writes_nothing_logs_once_and_the_backfill_fills_the_post_later(
        failure: str, processes: Processes, server: EmbeddingServer, infra: Infra, topology: Topology,
        database_url: str) -> None:
    url = server.url
    if failure == "refused":
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    embedder, metrics_url = _start(processes, url)
    known: dict[int, int] = {}
    if failure == "dimension":  # a first post of 8 dimensions, then the server answers 7
        known = {_posts(database_url, ["the first"])[0]: 8}
        _publish(infra, topology, ev.POST_CREATED, list(known))
        eventually(lambda: _vectors(database_url) == known, timeout=30, what="the first vector")
        server.dimension = 7
    else:
        server.mode = {"refused": "good"}.get(failure, failure)
    posts = _posts(database_url, ["failing one", "failing two"])
    kind = {"error": "http-status", "slow": "timeout", "dimension": "dimension", "refused": "connection"}[failure]
    for post in posts:  # two batches, one streak
        _publish(infra, topology, ev.POST_CREATED, [post])
        eventually(lambda: _queued(infra, topology) == 0, timeout=30, what="the message acked")
    eventually(lambda: _failures(metrics_url, kind) >= 2, timeout=30, what=f"{kind} failures counted")
    assert _vectors(database_url) == known  # no row for the failed posts
    assert embedder.log().count("embedding failed") == 1, embedder.log()[-3000:]
    assert embedder.stop(signal.SIGTERM, timeout=30) == 0, embedder.log()[-3000:]

    server.mode, server.dimension = "good", 8
    later, _ = _start(processes, server.url, "embedder-later")  # the idle backfill of a working model
    eventually(lambda: _vectors(database_url) == {**known, **{p: 8 for p in posts}}, timeout=60,
               what="the backfill's vectors")
    assert later.stop(signal.SIGTERM, timeout=30) == 0, later.log()[-3000:]


def test_a_killed_embedder_loses_nothing_the_backfill_does_not_restore(
        processes: Processes, server: EmbeddingServer, infra: Infra, topology: Topology, database_url: str) -> None:
    embedder, _ = _start(processes, server.url)
    server.mode = "slow"  # the batch in flight hangs in the model when the process dies
    posts = _posts(database_url, [f"post {i}" for i in range(20)])
    _publish(infra, topology, ev.POST_CREATED, posts)
    eventually(lambda: server.requests, timeout=30, what="a batch in the model")
    embedder.kill()  # SIGKILL
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:
        conn.channel().queue_purge(topology.embedder_queue)  # and the messages lost besides
    finally:
        conn.close()
    server.mode = "good"
    restarted, _ = _start(processes, server.url, "embedder-restarted")
    eventually(functools.partial(lambda: set(_vectors(database_url)) == set(posts)), timeout=60,
               what="every post's vector")
    assert restarted.stop(signal.SIGTERM, timeout=30) == 0, restarted.log()[-3000:]


def test_the_queue_keeps_the_newest_messages_when_full_and_never_refuses_the_relay(
        infra: Infra, topology: Topology) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:
        channel = conn.channel()
        EmbedderQueue(topology, max_length=3).declare(channel)
        channel.queue_declare(topology.embedder_queue, durable=True,  # the same arguments, or the broker refuses
                              arguments={"x-max-length": 3, "x-overflow": "drop-head"})
    finally:
        conn.close()
    _publish(infra, topology, ev.POST_CREATED, [1, 2, 3, 4, 5])  # confirmed, every one: none refused
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:
        channel = conn.channel()
        kept = []
        while (got := channel.basic_get(topology.embedder_queue, auto_ack=True))[0] is not None:
            kept.append(ev.decode(got[2]).payload["post_id"])
    finally:
        conn.close()
    assert kept == [3, 4, 5]


class _Down:
    """A model that fails every call, as a server that is down does."""

    model_id = f"ollama:{MODEL}"

    def dimension(self) -> int:
        return 8

    def embed(self, texts: Sequence[str]) -> Vectors:
        raise EmbedderUnavailable("connection refused", CONNECTION)


def test_a_batch_whose_model_fails_still_tombstones_its_deleted_posts(database_url: str) -> None:
    """Nothing else repairs a deleted post's vector (the backfill only adds missing ones): the batch's tombstones
    are written whatever the model does with its new posts, which the backfill embeds later."""
    kept, deleted, new = _posts(database_url, ["kept", "deleted", "new"])
    with psycopg.connect(database_url, autocommit=True) as conn:
        store.insert_vectors(conn, f"ollama:{MODEL}", [kept, deleted], numpy.eye(2, 8, dtype=numpy.float32))
        # the race the post.deleted event is for: a vector written by a transaction that read the post live just
        # before the delete committed, so the delete's trigger had no row to tombstone yet
        conn.execute("ALTER TABLE posts DISABLE TRIGGER USER")
        conn.execute("UPDATE posts SET deleted_at = now() WHERE id = %s", (deleted,))
        conn.execute("ALTER TABLE posts ENABLE TRIGGER USER")
    events = [ev.Event.new(ev.POST_CREATED, new, {"post_id": new, "author_id": 1}),
              ev.Event.new(ev.POST_DELETED, deleted, {"post_id": deleted, "author_id": 1})]
    pool: ConnectionPool[Any] = ConnectionPool(database_url, min_size=1, max_size=1, kwargs={"autocommit": True})
    with pool:
        assert Embedding(pool, Model(_Down())).apply(events) == "model-failed"
    assert _vectors(database_url) == {kept: 8}
