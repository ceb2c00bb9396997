"""Fixtures of the API tests: the app served in-process by uvicorn on a free port (a real HTTP socket, the
test's own database), an httpx client, a direct database connection, and sign-up helpers."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import psycopg
import pytest
import uvicorn
from fastapi import FastAPI
from psycopg.rows import dict_row

from services.api.app import create_app
from services.api.config import ApiSettings
from services.api.ratelimit import Quota
from services.core.embedding.config import EmbedderSettings
from services.core.settings import Settings
from testkit.processes import free_port
from testkit.waiting import eventually

MAX_BODY = 4096
# The api under test: rate limits far above what any test does, so no test trips them by accident, while every
# write still runs the limiter's statement. Tests of the limits build their own app (test_ratelimit.py).
TEST_API = ApiSettings(max_body_bytes=MAX_BODY, pool_min=1, pool_max=8, signup_limit=Quota("signup", 100_000, 3600),
                       write_limit=Quota("write", 1_000_000, 60))


@contextlib.contextmanager
def serve(app: FastAPI) -> Iterator[str]:
    """Serve `app` with uvicorn in a thread of this process on a free port; yields the base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, name="api-under-test", daemon=True)
    thread.start()
    eventually(lambda: server.started, timeout=20, what="in-process api to start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)


# No embedder in the api under test (semantic searches answer from text, `degraded`): loading the model costs each
# app ~0.5 s of CPU. tests/integration/search serves apps with the real model.
NO_EMBEDDER = EmbedderSettings(kind="off")


@pytest.fixture
def api_url(settings: Settings) -> Iterator[str]:
    with serve(create_app(settings, TEST_API, embedder_settings=NO_EMBEDDER)) as url:
        yield url


@pytest.fixture
def client(api_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_url, timeout=30) as c:
        yield c


@pytest.fixture
def db(database_url: str) -> Iterator[psycopg.Connection[dict[str, object]]]:
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        yield conn


@dataclass(frozen=True)
class Account:
    id: int
    handle: str
    token: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


SignUp = Callable[[str], Account]


@pytest.fixture
def signup(client: httpx.Client) -> SignUp:
    def make(handle: str) -> Account:
        reply = client.post("/v1/users", json={"handle": handle})
        assert reply.status_code == 201, reply.text
        body = reply.json()
        return Account(body["id"], body["handle"], body["token"])

    return make
