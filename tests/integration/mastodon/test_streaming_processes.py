"""Several api processes (WALFEED_API_WORKERS=2, each with its own stream queue on the events exchange): every
reader's stream gets a followed author's post, whichever process holds it."""

from __future__ import annotations

import pytest
from mastodon import Mastodon

from testkit.processes import Processes
from testkit.waiting import eventually
from tests.integration.mastodon.conftest import PASSWORD, SignUp, Stack
from tests.integration.mastodon.test_streaming import Recorder

pytestmark = [pytest.mark.e2e, pytest.mark.integration]
MAX_READERS = 40  # streams opened until both processes hold one (the kernel spreads connections over them)


@pytest.fixture
def api_env() -> dict[str, str]:
    return {"WALFEED_API_WORKERS": "2"}


def _feeds(processes: Processes) -> int:
    """api processes whose stream feed is connected (each logs it once, naming its own queue)."""
    return next(p for p in processes.all if p.name == "api").log().count("stream feed connected")


def test_every_stream_gets_the_post_whichever_api_process_holds_it(stack: Stack, signup: SignUp,
                                                                   processes: Processes) -> None:
    author = signup("author")
    client_id, secret = Mastodon.create_app("streams", scopes=["read", "write", "follow"], api_base_url=stack.base)
    heard: list[Recorder] = []
    handles = []
    try:
        for i in range(MAX_READERS):
            if _feeds(processes) >= 2:
                break
            reader = signup(f"reader{i}")
            assert stack.api.put(f"/v1/following/{author.id}", headers=reader.auth).status_code == 204
            client = Mastodon(client_id=client_id, client_secret=secret, api_base_url=stack.base)
            client.log_in(f"reader{i}", PASSWORD, scopes=["read", "write", "follow"])
            heard.append(Recorder())
            handles.append(client.stream_user(heard[-1], run_async=True, reconnect_async=False))
            eventually(lambda: heard[-1].heartbeats > 0, timeout=30, what="the stream open")
        assert _feeds(processes) == 2, "both api processes hold streams"
        eventually(lambda: all(h.heartbeats > 0 for h in heard), timeout=30, what="every stream open")
        post = stack.api.post("/v1/posts", json={"body": "to every process"}, headers=author.auth).json()
        eventually(lambda: all([u["id"] for u in h.events("update")] == [str(post["id"])] for h in heard),
                   timeout=30, what="the post in every reader's stream")
    finally:
        for handle in handles:
            handle.close()
