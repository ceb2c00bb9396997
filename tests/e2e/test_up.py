"""`walfeed up` brings the whole system up in one command and Ctrl-C stops all of it."""

from __future__ import annotations

import signal

import httpx
import pytest

from tests.harness.processes import Processes, alive, children_of, free_port
from tests.harness.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def test_up_serves_the_pipeline_and_ctrl_c_stops_every_child(processes: Processes) -> None:
    port = free_port()
    up = processes.start("up", "up", "--port", str(port))
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout=60, what="api ready under up")
    children = children_of(up.pid)
    assert len(children) == 3, children

    with httpx.Client(base_url=base, timeout=10) as api:
        user = api.post("/v1/users", json={"handle": "newcomer"}).json()
        auth = {"Authorization": f"Bearer {user['token']}"}
        post_id = api.post("/v1/posts", json={"body": "first!"}, headers=auth).json()["id"]
        eventually(lambda: any(i["id"] == post_id for i in api.get("/v1/timeline", headers=auth).json()["items"]),
                   timeout=30, what="post in the author's timeline")

    assert up.stop(signal.SIGINT, timeout=40) == 0, up.log()[-3000:]
    assert not any(alive(child) for child in children)
    log = up.log()
    for name in ("api", "relay", "worker"):
        assert f"{name} " in log
