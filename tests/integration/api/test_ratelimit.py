"""Rate limits (ADR 0033): sign-ups per client address, writes per user, 429 problems with Retry-After and the
draft-ietf-httpapi-ratelimit-headers fields, counted in Postgres so they hold across api processes."""

from __future__ import annotations

import functools
import re
import signal
from collections.abc import Iterator

import httpx
import pytest

from services.api.app import create_app
from services.api.config import ApiSettings
from services.api.ratelimit import Quota
from services.core.settings import Settings
from testkit.processes import Processes, free_port
from testkit.waiting import eventually
from tests.integration.api.conftest import serve

pytestmark = pytest.mark.integration

RATELIMIT = re.compile(r'^"(?P<policy>\w+)";r=(?P<r>\d+);t=(?P<t>\d+)$')


@pytest.fixture
def limited(settings: Settings) -> Iterator[httpx.Client]:
    api = ApiSettings(pool_min=1, pool_max=4, signup_limit=Quota("signup", 3, 3600),
                      write_limit=Quota("write", 3, 60))
    with serve(create_app(settings, api)) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


def _ready(base: str) -> bool:
    return httpx.get(f"{base}/readyz", timeout=5).status_code == 200


def signup(client: httpx.Client, handle: str, address: str = "203.0.113.7") -> httpx.Response:
    # The in-process server trusts X-Forwarded-For from 127.0.0.1 (uvicorn's FORWARDED_ALLOW_IPS default), as
    # behind a TLS proxy on the same host: each test address is a client of its own.
    return client.post("/v1/users", json={"handle": handle}, headers={"X-Forwarded-For": address})


def remaining(reply: httpx.Response, policy: str) -> tuple[int, int]:
    match = RATELIMIT.match(reply.headers["ratelimit"])
    assert match and match["policy"] == policy, reply.headers
    return int(match["r"]), int(match["t"])


def assert_limited(reply: httpx.Response, policy: str, window: int) -> None:
    assert reply.status_code == 429, reply.text
    assert reply.headers["content-type"] == "application/problem+json"
    assert reply.json()["status"] == 429 and reply.json()["type"].endswith("/rate-limited")
    r, t = remaining(reply, policy)
    assert r == 0 and 1 <= t <= window
    assert int(reply.headers["retry-after"]) >= t  # never earlier than the reset (the draft's rule)


def test_sign_ups_are_limited_per_client_address(limited: httpx.Client) -> None:
    replies = [signup(limited, f"u{i}") for i in range(3)]
    assert [r.status_code for r in replies] == [201, 201, 201]
    assert {r.headers["ratelimit-policy"] for r in replies} == {'"signup";q=3;w=3600'}
    assert [remaining(r, "signup")[0] for r in replies] == [2, 1, 0]
    assert_limited(signup(limited, "u3"), "signup", 3600)
    assert signup(limited, "u4", address="203.0.113.8").status_code == 201  # another client
    assert signup(limited, "u5", address="2001:db8::1").status_code == 201
    for i in range(2):  # the same /64 is one client
        assert signup(limited, f"v{i}", address=f"2001:db8::{i + 2}").status_code == 201
    assert_limited(signup(limited, "v9", address="2001:db8::ffff"), "signup", 3600)


def test_writes_are_limited_per_user_and_a_refused_write_writes_nothing(limited: httpx.Client) -> None:
    alice, bob = (signup(limited, h, address=f"198.51.100.{i}").json() for i, h in enumerate(("alice", "bob")))
    a, b = ({"Authorization": f"Bearer {u['token']}"} for u in (alice, bob))
    assert limited.post("/v1/posts", json={"body": "1"}, headers=a).status_code == 201
    assert limited.put(f"/v1/following/{bob['id']}", headers=a).status_code == 204
    post = limited.post("/v1/posts", json={"body": "3"}, headers=a)
    assert post.status_code == 201 and remaining(post, "write")[0] == 0
    assert post.headers["ratelimit-policy"] == '"write";q=3;w=60'
    for refused in (limited.post("/v1/posts", json={"body": "4"}, headers=a),
                    limited.delete(f"/v1/posts/{post.json()['id']}", headers=a),
                    limited.delete(f"/v1/following/{bob['id']}", headers=a)):
        assert_limited(refused, "write", 60)
    assert limited.get(f"/v1/posts/{post.json()['id']}", headers=a).status_code == 200  # not deleted
    assert [p["body"] for p in limited.get("/v1/timeline", headers=a).json()["items"]] == ["3", "1"]
    assert "ratelimit" not in limited.get("/v1/timeline", headers=a).headers  # reads are not limited
    assert limited.post("/v1/posts", json={"body": "bob's"}, headers=b).status_code == 201  # per user


def test_limits_hold_across_api_processes(processes: Processes) -> None:
    ports = [free_port(), free_port()]
    env = {"WALFEED_API_SIGNUP_LIMIT": "4", "WALFEED_API_WRITE_LIMIT": "5", "WALFEED_API_WRITE_WINDOW": "3600"}
    apis = [processes.start(f"api{i}", "api", "--port", str(port), env=env) for i, port in enumerate(ports)]
    bases = [f"http://127.0.0.1:{port}" for port in ports]
    for base in bases:
        eventually(functools.partial(_ready, base), timeout=60, what="api ready")
    # Alternating between the processes: one limit, not one per process.
    signups = [httpx.post(f"{bases[i % 2]}/v1/users", json={"handle": f"p{i}"}, timeout=10) for i in range(6)]
    assert [r.status_code for r in signups] == [201] * 4 + [429] * 2
    auth = {"Authorization": f"Bearer {signups[0].json()['token']}"}
    posts = [httpx.post(f"{bases[i % 2]}/v1/posts", json={"body": f"{i}"}, headers=auth, timeout=10)
             for i in range(8)]
    assert [r.status_code for r in posts] == [201] * 5 + [429] * 3
    for api in apis:
        assert api.stop(signal.SIGTERM, timeout=30) == 0, api.log()


@pytest.mark.parametrize("server", ["granian", "uvicorn"])
def test_the_real_process_partitions_sign_ups_by_the_address_a_local_proxy_forwards(processes: Processes,
                                                                                   server: str) -> None:
    port = free_port()
    api = processes.start("api", "api", "--port", str(port), env={
        "WALFEED_API_SIGNUP_LIMIT": "1", "WALFEED_API_SERVER": server})
    base = f"http://127.0.0.1:{port}"
    eventually(functools.partial(_ready, base), timeout=60, what="api ready")
    with httpx.Client(base_url=base, timeout=10) as client:  # from 127.0.0.1: trusted (FORWARDED_ALLOW_IPS)
        assert signup(client, "first").status_code == 201
        assert signup(client, "other", address="203.0.113.99").status_code == 201  # another client
        assert signup(client, "again").status_code == 429  # the first client's second
    assert api.stop(signal.SIGTERM, timeout=30) == 0, api.log()


def test_limits_are_off_at_zero(settings: Settings) -> None:
    api = ApiSettings(pool_min=1, pool_max=2, signup_limit=Quota("signup", 0, 3600),
                      write_limit=Quota("write", 0, 60))
    with serve(create_app(settings, api)) as url, httpx.Client(base_url=url, timeout=30) as client:
        user = client.post("/v1/users", json={"handle": "free"}).json()
        replies = [client.post("/v1/posts", json={"body": "x"}, headers={"Authorization": f"Bearer {user['token']}"})
                   for _ in range(20)]
        assert {r.status_code for r in replies} == {201}
        assert not {"ratelimit", "ratelimit-policy"} & set(replies[-1].headers)
