"""The Mastodon live stream under least privilege (ADR 0060, 0140): the api's own broker user declares and
consumes its stream queue on the events exchange, its database role reads the OAuth tables, and a password login,
a post and its streamed update all work with nothing more."""

from __future__ import annotations

import httpx
import pytest
from mastodon import Mastodon

from testkit.processes import Processes, free_port
from testkit.waiting import eventually
from tests.integration.mastodon.test_streaming import Recorder
from tests.integration.roles.conftest import RoleEnv

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

PASSWORD = "correct horse battery staple"


def test_the_api_streams_a_post_under_its_own_roles(processes: Processes, role_env: RoleEnv) -> None:
    port = free_port()
    processes.start("relay", "relay", env={**role_env("relay"), "WALFEED_RELAY_METRICS_PORT": "0"})
    processes.start("api", "api", "--port", str(port),
                    env={**role_env("api"), "WALFEED_MASTODON_STREAM_HEARTBEAT": "1"})
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout=60, what="api ready")
    with httpx.Client(base_url=base, timeout=10) as api:
        author, reader = (api.post("/v1/users", json={"handle": h, "password": PASSWORD}).json()
                          for h in ("author", "reader"))
        client_id, secret = Mastodon.create_app("roles", scopes=["read", "write", "follow"], api_base_url=base)
        client = Mastodon(client_id=client_id, client_secret=secret, api_base_url=base)
        client.log_in("reader", PASSWORD, scopes=["read", "write", "follow"])
        client.account_follow(str(author["id"]))
        heard = Recorder()
        handle = client.stream_user(heard, run_async=True, reconnect_async=False)
        try:
            eventually(lambda: heard.heartbeats > 0, timeout=30, what="the stream open")
            post = api.post("/v1/posts", json={"body": "under roles"},
                            headers={"Authorization": f"Bearer {author['token']}"}).json()
            eventually(lambda: [u["id"] for u in heard.events("update")] == [str(post["id"])], timeout=30,
                       what="the streamed update")
        finally:
            handle.close()
    assert reader["handle"] == "reader"
