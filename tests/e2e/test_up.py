"""`walfeed up` brings the whole system up in one command and Ctrl-C stops all of it."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import httpx
import psycopg
import pytest

from services.cli.roles import RoleSettings
from testkit import roles
from testkit.infra import Infra
from testkit.processes import Processes, alive, children_of, free_port
from testkit.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


@pytest.fixture
def up_roles(infra: Infra) -> Iterator[RoleSettings]:
    """Requested before `processes` (and so the database): dropped after the database is."""
    with roles.test_roles(infra) as settings:
        yield settings


def test_up_serves_the_pipeline_under_the_app_roles_and_ctrl_c_stops_every_child(
        up_roles: RoleSettings, processes: Processes, database_url: str) -> None:
    port = free_port()
    # No passwords given: `up` makes them for the run.
    up = processes.start("up", "up", "--port", str(port), env={"WALFEED_ROLE_PREFIX": up_roles.roles.prefix})
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout=60, what="api ready under up")
    children = children_of(up.pid)
    assert len(children) == 6, children  # api, relay, worker, notifier, the webhook delivery worker (no SMTP set),
    # the embedder

    with httpx.Client(base_url=base, timeout=10) as api:
        user = api.post("/v1/users", json={"handle": "newcomer"}).json()
        auth = {"Authorization": f"Bearer {user['token']}"}
        post_id = api.post("/v1/posts", json={"body": "first!"}, headers=auth).json()["id"]
        eventually(lambda: any(i["id"] == post_id for i in api.get("/v1/timeline", headers=auth).json()["items"]),
                   timeout=30, what="post in the author's timeline")

    with psycopg.connect(database_url, autocommit=True) as conn:
        users = {r[0] for r in conn.execute("SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = "
                                            "current_database() AND pid <> pg_backend_pid()").fetchall()}
    assert users == {up_roles.roles.login(p) for p in ("api", "relay", "worker", "notifier", "delivery", "embedder")}

    assert up.stop(signal.SIGINT, timeout=40) == 0, up.log()[-3000:]
    assert not any(alive(child) for child in children)
    log = up.log()
    for name in ("api", "relay", "worker", "notifier", "deliver-webhook", "embedder"):
        assert f"{name} " in log
