"""Search end to end with the real processes and the real local model: api -> outbox -> relay -> embedder ->
post_embeddings -> the api's index. A post is searchable by meaning within a bound after its commit, and a deleted
post leaves every mode's results at once."""

from __future__ import annotations

import signal
import time

import httpx
import pytest

from testkit.processes import Processes, free_port
from testkit.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

# From the post's commit to its vector in the api's index: the relay's publish, the embedder's batch (milliseconds),
# the api's poll (WALFEED_SEARCH_POLL_INTERVAL, 0.2 s here); generous for a loaded 2-core machine.
SEARCHABLE_WITHIN = 20.0


def test_a_post_is_searchable_by_meaning_soon_after_its_commit_and_not_after_its_deletion(
        processes: Processes) -> None:
    port = free_port()
    api = processes.start("api", "api", "--port", str(port), env={"WALFEED_SEARCH_POLL_INTERVAL": "0.2"})
    relay = processes.start("relay", "relay")
    embedder = processes.start("embedder", "embedder", env={"WALFEED_EMBEDDER_METRICS_PORT": str(free_port())})
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout=60, what="api ready")
    with httpx.Client(base_url=base, timeout=30) as client:
        token = client.post("/v1/users", json={"handle": "searcher"}).json()["token"]
        auth = {"Authorization": f"Bearer {token}"}

        def found(q: str, mode: str) -> dict[str, object]:
            reply = client.get("/v1/search", params={"q": q, "mode": mode}, headers=auth)
            assert reply.status_code == 200, reply.text
            return reply.json()  # type: ignore[no-any-return]

        # The empty database's model is complete once the embedder's idle backfill has looked: semantic answers.
        eventually(lambda: found("anything", "semantic")["degraded"] is None, timeout=90,
                   what="the api's index built and its model complete")
        post = client.post("/v1/posts", json={"body": "Stock markets fell sharply as investors panicked"},
                           headers=auth).json()["id"]
        committed = time.monotonic()

        def by_meaning() -> bool:
            items = found("equities slump", "semantic")["items"]
            return any(item["id"] == post for item in items)  # type: ignore[attr-defined]

        eventually(by_meaning, timeout=SEARCHABLE_WITHIN, interval=0.05, what="the post found by meaning")
        print(f"searchable by meaning {time.monotonic() - committed:.2f} s after the commit")
        assert client.delete(f"/v1/posts/{post}", headers=auth).status_code == 204
        for q, mode in (("equities slump", "semantic"), ("equities slump", "hybrid"), ("markets", "text"),
                        ("markets", "hybrid")):
            items = found(q, mode)["items"]
            assert post not in [item["id"] for item in items], (q, mode)  # type: ignore[attr-defined]
    for proc in (api, relay, embedder):
        assert proc.stop(signal.SIGTERM, timeout=30) == 0, proc.log()[-3000:]
