"""What a token's scopes let a live stream carry, and how many streams one user may hold on a process: the user
stream carries notifications only for a token that covers read:notifications, which is what the notification
stream needs (as Mastodon's streaming server); one account cannot take every stream a process holds."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import pytest

from testkit.waiting import eventually
from tests.integration.mastodon.conftest import PASSWORD, SignUp, Stack

pytestmark = [pytest.mark.e2e, pytest.mark.integration]
PER_USER = 2


@pytest.fixture
def api_env() -> dict[str, str]:
    return {"WALFEED_MASTODON_STREAMS_PER_USER": str(PER_USER)}


def _token(stack: Stack, handle: str, scope: str) -> str:
    app = stack.api.post("/api/v1/apps", json={"client_name": "limits", "redirect_uris": "urn:ietf:wg:oauth:2.0:oob",
                                               "scopes": "read write follow"}).json()
    reply = stack.api.post("/oauth/token", data={
        "grant_type": "password", "client_id": app["client_id"], "client_secret": app["client_secret"],
        "username": handle, "password": PASSWORD, "scope": scope})
    assert reply.status_code == 200, reply.text
    return str(reply.json()["access_token"])


class Events:
    """An open SSE stream, read on demand: the event names received so far."""

    def __init__(self, response: httpx.Response) -> None:
        self.response, self.names, self._lines = response, list[str](), response.iter_lines()

    def read_until(self, name: str) -> bool:
        for line in self._lines:
            if line.startswith("event: "):
                self.names.append(line.removeprefix("event: "))
            if name in self.names or line == ":thump":
                return name in self.names
        return name in self.names


@contextlib.contextmanager
def _stream(stack: Stack, token: str, path: str = "/api/v1/streaming/user") -> Iterator[httpx.Response]:
    with httpx.Client(base_url=stack.base, timeout=10) as client, \
            client.stream("GET", path, headers={"Authorization": f"Bearer {token}"}) as response:
        yield response


def test_the_user_stream_carries_notifications_only_for_a_token_that_may_read_them(stack: Stack,
                                                                                   signup: SignUp) -> None:
    reader, author = signup("reader"), signup("author")
    assert stack.api.put(f"/v1/following/{author.id}", headers=reader.auth).status_code == 204
    statuses_only = _token(stack, "reader", "read:statuses")
    everything = _token(stack, "reader", "read")
    with _stream(stack, statuses_only) as narrow, _stream(stack, everything) as wide:
        assert narrow.status_code == 200 and wide.status_code == 200
        assert stack.api.post("/v1/posts", json={"body": "hello @reader"}, headers=author.auth).status_code == 201
        seen_wide, seen_narrow = Events(wide), Events(narrow)
        eventually(lambda: seen_wide.read_until("notification"), timeout=30, what="the mention on the wide stream")
        eventually(lambda: seen_narrow.read_until("update"), timeout=30, what="the post on the narrow stream")
        seen_narrow.read_until("notification")  # what arrived with the post, up to the next heartbeat
        assert "update" in seen_wide.names and "notification" not in seen_narrow.names
    notifications_only = _token(stack, "reader", "read:notifications")
    with _stream(stack, notifications_only, "/api/v1/streaming/user/notification") as notes:
        assert notes.status_code == 200
    with _stream(stack, notifications_only) as refused:
        assert refused.status_code == 403  # the home timeline's statuses are not in its scopes


def test_one_user_holds_at_most_the_per_user_streams_and_others_still_get_theirs(stack: Stack,
                                                                                signup: SignUp) -> None:
    signup("greedy"), signup("other")
    greedy, other = _token(stack, "greedy", "read"), _token(stack, "other", "read")
    with contextlib.ExitStack() as held:
        for _ in range(PER_USER):
            assert held.enter_context(_stream(stack, greedy)).status_code == 200
        with _stream(stack, greedy) as one_more:
            assert one_more.status_code == 429 and one_more.headers["retry-after"] == "5"
            one_more.read()
            assert "streams on this server already" in one_more.json()["error"]
        with _stream(stack, other) as theirs:
            assert theirs.status_code == 200
    eventually(lambda: _opens(stack, greedy), timeout=30, what="a stream again once the others closed")


def _opens(stack: Stack, token: str) -> bool:
    with _stream(stack, token) as response:
        return response.status_code == 200
