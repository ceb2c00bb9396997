"""The real processes a Mastodon client talks to: the api (`walfeed api`, a subprocess on a free port), the relay,
the fan-out worker and the notifier, with the test's own database and AMQP names; accounts with passwords made
through walfeed's own sign-up (POST /v1/users), as the clients cannot sign up."""

from __future__ import annotations

import html.parser
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest

from testkit.processes import Processes, free_port
from testkit.waiting import eventually
from tests.integration.api.conftest import api_url, client  # noqa: F401 - the in-process api's fixtures

THRESHOLD = 2  # followers that make an author a celebrity: their posts are pulled into timelines at read time
PASSWORD = "correct horse battery staple"


@dataclass(frozen=True)
class Stack:
    base: str
    api: httpx.Client


@pytest.fixture
def base(api_url: str) -> str:  # noqa: F811 - the fixture imported above
    """The api served in this process (tests/integration/api/conftest.py), for the tests without the pipeline."""
    return api_url


@pytest.fixture
def api(client: httpx.Client) -> httpx.Client:  # noqa: F811
    return client


@pytest.fixture
def api_env() -> dict[str, str]:
    """Settings of the api process beyond the test environment's (a test module may override this fixture)."""
    return {}


@pytest.fixture
def stack(processes: Processes, api_env: dict[str, str]) -> Iterator[Stack]:
    port = free_port()
    quiet = {"WALFEED_RELAY_METRICS_PORT": "0", "WALFEED_NOTIFIER_METRICS_PORT": "0",
             "WALFEED_WORKER_METRICS_PORT": "0", "WALFEED_CELEBRITY_THRESHOLD": str(THRESHOLD),
             "WALFEED_MASTODON_STREAM_HEARTBEAT": "1"}
    processes.start("api", "api", "--port", str(port), env={**quiet, **api_env})
    for name in ("relay", "worker", "notifier"):
        processes.start(name, name, env=quiet)
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout=30, what="api ready")
    with httpx.Client(base_url=base, timeout=30) as api:
        yield Stack(base, api)


@dataclass(frozen=True)
class Person:
    id: int
    handle: str
    token: str  # the api's own bearer token

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


SignUp = Callable[[str], Person]


@pytest.fixture
def signup(stack: Stack) -> SignUp:
    def make(handle: str) -> Person:
        reply = stack.api.post("/v1/users", json={"handle": handle, "password": PASSWORD})
        assert reply.status_code == 201, reply.text
        body = reply.json()
        return Person(body["id"], body["handle"], body["token"])

    return make


class FormReader(html.parser.HTMLParser):
    """A browser's reading of the login page: the form's action and its inputs (name -> value)."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}
        self.code: str | None = None
        self._in_code = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "form":
            self.action = found.get("action")
        elif tag == "input" and found.get("name"):
            self.fields[found["name"] or ""] = found.get("value") or ""
        elif tag == "code":
            self._in_code = True

    def handle_data(self, data: str) -> None:
        if self._in_code:
            self.code = data.strip()
            self._in_code = False


def read_page(text: str) -> FormReader:
    reader = FormReader()
    reader.feed(text)
    return reader
