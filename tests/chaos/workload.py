"""API clients doing random follows, unfollows, posts and deletes, and recording what was acknowledged.

A request that fails (api killed, database restarting) is retried until acknowledged or a deadline: posts with
the same Idempotency-Key, so a retry never creates a second post. Only acknowledged operations count.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from dataclasses import dataclass, field

import httpx

RETRY_DEADLINE = 90.0  # seconds one operation keeps being retried through faults


@dataclass
class Account:
    id: int
    token: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class Acknowledged:
    posts: dict[int, int] = field(default_factory=dict)   # post id -> author id, answered 201
    deleted: set[int] = field(default_factory=set)        # answered 204
    follows: int = 0
    unfollows: int = 0
    reads: int = 0
    gave_up: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def operations(self) -> int:
        return len(self.posts) + len(self.deleted) + self.follows + self.unfollows + self.reads


def request(base: str, method: str, path: str, ok: set[int], **kwargs: object) -> httpx.Response | None:
    """Retry through connection errors and 5xx until a status in `ok` (returned) or the deadline (None)."""
    deadline = time.monotonic() + RETRY_DEADLINE
    while time.monotonic() < deadline:
        try:
            resp = httpx.request(method, base + path, timeout=10, **kwargs)  # type: ignore[arg-type]
            if resp.status_code in ok:
                return resp
            if resp.status_code < 500:
                raise AssertionError(f"{method} {path} -> {resp.status_code}: {resp.text}")
        except httpx.TransportError:
            pass
        time.sleep(0.2)  # back off before retrying through a fault
    return None


def sign_up(base: str, n: int) -> list[Account]:
    accounts = []
    for i in range(n):
        resp = request(base, "POST", "/v1/users", {201}, json={"handle": f"u{i}_{uuid.uuid4().hex[:6]}"})
        assert resp is not None
        body = resp.json()
        accounts.append(Account(body["id"], body["token"]))
    return accounts


def client(base: str, accounts: list[Account], acked: Acknowledged, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    mine: list[tuple[Account, int]] = []
    while not stop.is_set():
        me = rng.choice(accounts)
        roll = rng.random()
        if roll < 0.45:
            key = uuid.uuid4().hex
            resp = request(base, "POST", "/v1/posts", {201, 200}, headers={**me.auth, "Idempotency-Key": key},
                           json={"body": f"post {key[:8]}"})
            if resp is None:
                acked.gave_up += 1
                continue
            with acked.lock:
                acked.posts[resp.json()["id"]] = me.id
            mine.append((me, resp.json()["id"]))
        elif roll < 0.70:
            other = rng.choice(accounts)
            if other.id == me.id:
                continue
            if request(base, "PUT", f"/v1/following/{other.id}", {204}, headers=me.auth) is None:
                acked.gave_up += 1
            else:
                acked.follows += 1
        elif roll < 0.82:
            other = rng.choice(accounts)
            if request(base, "DELETE", f"/v1/following/{other.id}", {204}, headers=me.auth) is None:
                acked.gave_up += 1
            else:
                acked.unfollows += 1
        elif roll < 0.90 and mine:
            author, post_id = mine.pop(rng.randrange(len(mine)))
            # 404 after a retry: the first attempt deleted it before the connection broke.
            if request(base, "DELETE", f"/v1/posts/{post_id}", {204, 404}, headers=author.auth) is None:
                acked.gave_up += 1
            else:
                with acked.lock:
                    acked.deleted.add(post_id)
        else:
            if request(base, "GET", "/v1/timeline", {200}, headers=me.auth, params={"limit": 20}) is not None:
                acked.reads += 1
