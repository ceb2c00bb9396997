"""Search's rights (020_search.sql, db/roles/grants.sql): the embedder writes vectors of live posts, the api reads
them, and the api's soft delete of a post makes its vectors tombstones through the owner's trigger."""

from __future__ import annotations

import httpx
import numpy as np
import psycopg
import pytest

from services.cli.roles import RoleSettings
from services.embedder import store
from testkit.processes import Processes, free_port
from testkit.waiting import eventually
from tests.integration.roles.conftest import RoleEnv
from tests.integration.roles.test_processes_under_roles import sessions

pytestmark = pytest.mark.integration

VECTORS = np.full((1, 4), 0.5, dtype=np.float32)


def test_the_embedder_writes_vectors_the_api_reads_and_the_api_delete_tombstones_them(
        role_env: RoleEnv, database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as admin:
        author = admin.execute("INSERT INTO users (handle, token_hash) VALUES ('s', 'x') RETURNING id").fetchone()
        assert author is not None
        post = admin.execute("INSERT INTO posts (author_id, body) VALUES (%s, 'hello') RETURNING id",
                             (author[0],)).fetchone()
        assert post is not None
    with psycopg.connect(role_env("embedder")["WALFEED_DATABASE_URL"], autocommit=True) as embedder:
        assert store.bodies(embedder, [post[0]]) == [(post[0], "hello")]
        assert store.insert_vectors(embedder, "m", [post[0]], VECTORS) == 1
        assert store.insert_vectors(embedder, "m", [post[0]], VECTORS) == 0  # a redelivery
        assert store.tombstone(embedder, [post[0]]) == 0  # the post is live
        assert store.ensure_model(embedder, "m") == (0, False)
        store.advance(embedder, "m", post[0], True)
        covered = store.coverage(embedder, "m")
        assert (covered.live, covered.embedded, covered.position) == (1, 1, post[0])
    with psycopg.connect(role_env("api")["WALFEED_DATABASE_URL"], autocommit=True) as api:
        assert api.execute("SELECT vector FROM post_embeddings WHERE post_id = %s",
                           (post[0],)).fetchone() == (VECTORS[0].astype("<f4").tobytes(),)
        api.execute("UPDATE posts SET deleted_at = now() WHERE id = %s", (post[0],))
        assert api.execute("SELECT vector FROM post_embeddings WHERE post_id = %s", (post[0],)).fetchone() == (None,)


@pytest.mark.e2e
def test_relay_embedder_and_api_search_by_meaning_each_under_its_role(
        processes: Processes, role_env: RoleEnv, role_settings: RoleSettings, database_url: str) -> None:
    port = free_port()
    processes.start("relay", "relay", env={**role_env("relay"), "WALFEED_RELAY_METRICS_PORT": "0"})
    processes.start("embedder", "embedder", env={**role_env("embedder"), "WALFEED_EMBEDDER_METRICS_PORT": "0"})
    processes.start("api", "api", "--port", str(port), env={**role_env("api"), "WALFEED_SEARCH_POLL_INTERVAL": "0.2"})
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout=60, what="api ready")
    with httpx.Client(base_url=base, timeout=30) as api:
        auth = {"Authorization": f"Bearer {api.post('/v1/users', json={'handle': 'alice'}).json()['token']}"}
        post = api.post("/v1/posts", json={"body": "The cat sat on the mat all afternoon"}, headers=auth).json()

        def found() -> bool:
            page = api.get("/v1/search", params={"q": "kitten resting on a rug", "mode": "semantic"},
                           headers=auth).json()
            return page["degraded"] is None and post["id"] in [i["id"] for i in page["items"]]

        eventually(found, timeout=90, what="the post found by meaning")
        assert api.delete(f"/v1/posts/{post['id']}", headers=auth).status_code == 204
        assert not found()
    roles = role_settings.roles
    assert {roles.login("embedder"), roles.login("api")} <= sessions(database_url)
