"""Reads on a real streaming replica (WALFEED_DATABASE_READ_URL, docs/adr/0092), started by the harness
(testkit/pgcluster.py): a writer always reads their own writes, also while the standby's replay is paused;
another user sees a post once the standby replayed it; a replica down leaves reads served by the primary."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest

from services.api.app import create_app
from services.api.readafter import HEADER
from services.core.settings import Settings
from testkit import metrics
from testkit.pgcluster import Node, PgCluster, dbname
from testkit.processes import Processes, free_port
from testkit.waiting import eventually
from tests.integration.api.conftest import TEST_API, Account, SignUp, serve

pytestmark = pytest.mark.integration

WAIT = 0.2  # WALFEED_API_READ_AFTER_WAIT of the api under test: a paused replay costs each read this much


@dataclasses.dataclass(frozen=True)
class Replicated:
    cluster: PgCluster
    primary_url: str
    replica_url: str

    @property
    def standby(self) -> Node:
        return self.cluster.standbys[0]


def _database(cluster: PgCluster) -> Replicated:
    url = cluster.migrated_database()
    return Replicated(cluster, url, cluster.standbys[0].url(dbname(url)))


@contextlib.contextmanager
def _api(db: Replicated, **api: object) -> Iterator[str]:
    settings = Settings.from_env({"WALFEED_DATABASE_URL": db.primary_url})
    with serve(create_app(settings, dataclasses.replace(TEST_API, read_url=db.replica_url, read_after_wait=WAIT,
                                                         **api))) as url:  # type: ignore[arg-type]
        yield url


@pytest.fixture
def replicated(pg_cluster: PgCluster) -> Replicated:
    return _database(pg_cluster)


@pytest.fixture
def api_url(replicated: Replicated) -> Iterator[str]:
    """The api with its reads on the cluster's standby (overrides the api tests' api on the shared server)."""
    with _api(replicated) as url:
        yield url


@contextlib.contextmanager
def replay_paused(standby: Node) -> Iterator[None]:
    with psycopg.connect(standby.url(), autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_pause()")
        try:
            yield
        finally:
            conn.execute("SELECT pg_wal_replay_resume()")


def _reads(client: httpx.Client) -> dict[tuple[str, str], float]:
    """walfeed_api_replica_reads_total by (server, reason)."""
    found = metrics.labelled(client.get("/metrics").text, "walfeed_api_replica_reads_total")
    return {(labels["server"], labels["reason"]): value for labels, value in found}


def _post(client: httpx.Client, author: Account, body: str) -> tuple[int, str]:
    reply = client.post("/v1/posts", json={"body": body}, headers=author.auth)
    assert reply.status_code == 201, reply.text
    return reply.json()["id"], reply.headers[HEADER]


def _sees_own_post(client: httpx.Client, author: Account, post_id: int, headers: dict[str, str]) -> None:
    headers = {**author.auth, **headers}
    assert client.get(f"/v1/posts/{post_id}", headers=headers).status_code == 200
    assert post_id in [p["id"] for p in client.get("/v1/timeline", headers=headers).json()["items"]]
    assert post_id in [p["id"] for p in client.get(f"/v1/users/{author.id}/posts", headers=headers).json()["items"]]


def test_a_writer_always_reads_their_own_post_also_while_replay_is_paused(
        client: httpx.Client, signup: SignUp, replicated: Replicated) -> None:
    alice = signup("alice")
    for i in range(40):  # the replica replays as fast as it can: reads wait for it or read the primary
        post_id, token = _post(client, alice, f"live {i}")
        _sees_own_post(client, alice, post_id, {HEADER: token})
    live = _reads(client)
    assert live.get(("replica", "replayed"), 0) + live.get(("replica", "waited"), 0) > 0, live
    with replay_paused(replicated.standby):
        for i in range(8):
            post_id, token = _post(client, alice, f"paused {i}")
            _sees_own_post(client, alice, post_id, {HEADER: token})  # the client sends the token back
            _sees_own_post(client, alice, post_id, {})  # it does not: this process remembers alice's write
    paused = _reads(client)
    assert paused.get(("primary", "lagging"), 0) >= 8 * 6, paused  # every read of the pause fell back


def test_another_user_sees_a_post_once_the_replica_replayed_it(
        client: httpx.Client, signup: SignUp, replicated: Replicated) -> None:
    alice, bob = signup("alice"), signup("bob")
    assert client.put(f"/v1/following/{alice.id}", headers=bob.auth).status_code == 204
    cluster = replicated.cluster
    cluster.wait_replayed(replicated.standby, cluster.current_lsn(cluster.primary))  # bob's follow is there
    with replay_paused(replicated.standby):
        post_id, _ = _post(client, alice, "news")
        with psycopg.connect(replicated.primary_url, autocommit=True) as primary:  # the worker's fan-out (alice's
            primary.execute("UPDATE posts SET fanned_out = true WHERE id = %s", (post_id,))  # own row came with it)
            primary.execute("INSERT INTO timelines (user_id, post_id, author_id) VALUES (%s, %s, %s)",
                            (bob.id, post_id, alice.id))
        # bob's reads go to the replica, which has not replayed alice's post: proof that reads are served there
        assert client.get(f"/v1/posts/{post_id}", headers=bob.auth).status_code == 404
        assert client.get("/v1/timeline", headers=bob.auth).json()["items"] == []
        ready = client.get("/readyz").json()
        assert ready["replica"]["status"] == "ok" and ready["replica"]["lag_bytes"] > 0, ready
    eventually(lambda: client.get(f"/v1/posts/{post_id}", headers=bob.auth).status_code == 200, timeout=30,
               what="bob sees alice's post once replayed")
    items = eventually(lambda: client.get("/v1/timeline", headers=bob.auth).json()["items"], timeout=30,
                       what="alice's post in bob's timeline")
    assert [p["id"] for p in items] == [post_id]


@pytest.mark.parametrize("path", ["/v1/timeline", "/v1/posts/1", "/v1/users/1", "/v1/users/1/posts", "/v1/users/me"])
def test_a_malformed_token_is_a_400_problem_naming_the_header(client: httpx.Client, signup: SignUp,
                                                             path: str) -> None:
    alice = signup("alice")
    reply = client.get(path, headers={**alice.auth, HEADER: "tomorrow"})
    assert reply.status_code == 400 and reply.json()["type"].endswith("/invalid-read-after"), reply.text
    assert HEADER in reply.json()["detail"]


@pytest.mark.parametrize("forged", ["FFFFFFFF/FFFFFFFF", "7FFF/0"])
def test_a_token_beyond_the_primary_waits_for_nothing_while_the_replica_lags(
        client: httpx.Client, signup: SignUp, replicated: Replicated, forged: str) -> None:
    """A position the primary never wrote names no write: it is dropped, and the reads wait only for the caller's
    own writes (alice's post, replayed before the pause). Lowered to the primary's current position instead, each
    of them would wait for carol's post, written while the replay is paused, the whole bound in a waiter slot,
    and then read the primary."""
    alice, carol = signup("alice"), signup("carol")
    post_id, _ = _post(client, alice, "hello")
    cluster = replicated.cluster
    cluster.wait_replayed(replicated.standby, cluster.current_lsn(cluster.primary))  # alice's post is there
    with replay_paused(replicated.standby):
        _post(client, carol, "written while the replica lags")
        before = _reads(client)
        with ThreadPoolExecutor(12) as pool:
            codes = list(pool.map(lambda _: client.get(f"/v1/posts/{post_id}", headers={
                **alice.auth, HEADER: forged}).status_code, range(24)))
        after = _reads(client)
    assert codes == [200] * 24
    new = {key: after.get(key, 0) - before.get(key, 0) for key in after}
    assert new.get(("replica", "replayed"), 0) == 24 and sum(new.values()) == 24, new


def test_reads_are_served_by_the_primary_while_the_replica_is_down(fresh_pg_cluster: PgCluster) -> None:
    db = _database(fresh_pg_cluster)
    with _api(db) as base, httpx.Client(base_url=base, timeout=30) as client:
        reply = client.post("/v1/users", json={"handle": "alice"})
        alice = Account(reply.json()["id"], "alice", reply.json()["token"])
        post_id, _ = _post(client, alice, "before the replica went down")
        fresh_pg_cluster.stop(db.standby, "immediate")
        other = client.post("/v1/users", json={"handle": "bob"}).json()  # no token, nothing remembered
        bob = Account(other["id"], "bob", other["token"])
        for _ in range(5):
            assert client.get(f"/v1/posts/{post_id}", headers=bob.auth).status_code == 200
            assert client.get(f"/v1/users/{alice.id}/posts", headers=bob.auth).json()["items"][0]["id"] == post_id
        ready = client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["replica"] == {"status": "unreachable"}, ready.text
        reads = _reads(client)
        assert reads.get(("primary", "replica-error"), 0) >= 1 and reads.get(("primary", "replica-down"), 0) >= 5


def test_concurrent_writers_beyond_the_waiter_cap_still_read_their_posts(
        client: httpx.Client, signup: SignUp, replicated: Replicated) -> None:
    """Half the replica pool (TEST_API: 8) may wait at once; the reads beyond go to the primary at once."""
    writers = [signup(f"w{i}") for i in range(12)]
    with replay_paused(replicated.standby), ThreadPoolExecutor(len(writers)) as pool:
        posts = [_post(client, w, "paused") for w in writers]
        results = list(pool.map(lambda wp: client.get(f"/v1/posts/{wp[1][0]}", headers={
            **wp[0].auth, HEADER: wp[1][1]}).status_code, zip(writers, posts, strict=True)))
    assert results == [200] * len(writers)
    reads = _reads(client)
    assert reads.get(("primary", "busy"), 0) >= 1 and reads.get(("primary", "lagging"), 0) >= 1, reads


def test_the_walfeed_api_process_with_two_workers_reads_the_replica_from_its_settings(
        replicated: Replicated, tmp_path: Path) -> None:
    """WALFEED_DATABASE_READ_URL through the real command; with two worker processes only the header carries a
    write to a read served by the other process, and it does."""
    port = free_port()
    processes = Processes({"WALFEED_DATABASE_URL": replicated.primary_url,
                           "WALFEED_DATABASE_READ_URL": replicated.replica_url, "WALFEED_API_WORKERS": "2",
                           "WALFEED_API_SIGNUP_LIMIT": "0", "WALFEED_API_WRITE_LIMIT": "0", "TMPDIR": str(tmp_path)},
                          tmp_path)
    try:
        api = processes.start("api", "api", "--port", str(port))
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            ready = eventually(lambda: client.get("/readyz").json().get("replica"), timeout=60, what="api ready")
            assert ready["status"] == "ok", ready
            reply = client.post("/v1/users", json={"handle": "alice"})
            alice = Account(reply.json()["id"], "alice", reply.json()["token"])
            with replay_paused(replicated.standby):
                for i in range(10):  # new connections: uvicorn's workers take turns
                    post_id, token = _post(client, alice, f"post {i}")
                    with httpx.Client(base_url=client.base_url, timeout=30) as fresh:
                        assert fresh.get(f"/v1/posts/{post_id}", headers={**alice.auth, HEADER: token}
                                         ).status_code == 200
        assert api.stop(signal.SIGTERM, timeout=30) == 0, api.log()
    finally:
        processes.kill_all()


def test_an_account_the_replica_has_not_replayed_yet_is_read_on_the_primary(replicated: Replicated) -> None:
    """Signed up on one process and read on another (here: a process that remembers no writes), the caller's own
    account is not on a replica that lags: that read goes to the primary, not to a 500."""
    with _api(replicated, read_after_memory=0.0) as url, httpx.Client(base_url=url, timeout=10) as api:
        with replay_paused(replicated.standby):
            made = api.post("/v1/users", json={"handle": "dave"})
            assert made.status_code == 201, made.text
            me = api.get("/v1/users/me", headers={"Authorization": f"Bearer {made.json()['token']}"})
            assert me.status_code == 200 and me.json()["handle"] == "dave", me.text
        assert _reads(api).get(("primary", "not-replayed"), 0) == 1
