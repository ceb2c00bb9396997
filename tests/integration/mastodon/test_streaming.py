"""The live stream with Mastodon.py's `stream_user` against the real processes: a followed author's new post
arrives as `update`, a mention as `notification`, the deletion as `delete`; heartbeats keep an idle stream
open. Fed from the pipeline (relay -> events exchange -> the api's own queue; the notifier's commit -> NOTIFY),
never by polling the database per client."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import httpx
import pytest
from mastodon import Mastodon, StreamListener

from testkit.processes import Processes
from testkit.waiting import eventually
from tests.integration.mastodon.conftest import PASSWORD, SignUp, Stack

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


class Recorder(StreamListener):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.got: list[tuple[str, Any]] = []
        self.heartbeats = 0

    def on_update(self, status: Any) -> None:
        with self.lock:
            self.got.append(("update", status))

    def on_delete(self, status_id: Any) -> None:
        with self.lock:
            self.got.append(("delete", status_id))

    def on_notification(self, notification: Any) -> None:
        with self.lock:
            self.got.append(("notification", notification))

    def handle_heartbeat(self) -> None:
        with self.lock:
            self.heartbeats += 1

    def events(self, kind: str) -> list[Any]:
        with self.lock:
            return [item for event, item in self.got if event == kind]


def _login(stack: Stack, handle: str) -> Mastodon:
    client_id, secret = Mastodon.create_app("stream tests", scopes=["read", "write", "follow"],
                                            api_base_url=stack.base)
    client = Mastodon(client_id=client_id, client_secret=secret, api_base_url=stack.base)
    client.log_in(handle, PASSWORD, scopes=["read", "write", "follow"])
    return client


def _streams(stack: Stack) -> int:
    metrics = httpx.get(f"{stack.base}/metrics").text
    return int(float(next(line.split()[-1] for line in metrics.splitlines()
                          if line.startswith("walfeed_api_mastodon_streams "))))


def _reader_streaming(stack: Stack, signup: SignUp) -> tuple[Mastodon, Mastodon, Recorder, Any]:
    """A reader following an author, logged in through Mastodon.py, with their user stream open."""
    signup("reader"), signup("author")
    reader, author = _login(stack, "reader"), _login(stack, "author")
    reader.account_follow(reader.account_lookup("author")["id"])
    heard = Recorder()
    handle = reader.stream_user(heard, run_async=True, reconnect_async=False)
    eventually(lambda: heard.heartbeats > 0, timeout=30, what="the stream open (a heartbeat)")
    return reader, author, heard, handle


def test_stream_user_receives_updates_notifications_and_deletes(stack: Stack, signup: SignUp) -> None:
    reader, author, heard, handle = _reader_streaming(stack, signup)
    try:
        posted = author.status_post("live @reader")
        updates = eventually(lambda: heard.events("update"), timeout=30, what="the update")
        assert [(u["id"], u["account"]["username"], u["content"]) for u in updates] == [
            (posted["id"], "author", "<p>live @reader</p>")]
        mention = eventually(lambda: heard.events("notification"), timeout=30, what="the mention")
        assert [(n["type"], n["status"]["id"]) for n in mention] == [("mention", posted["id"])]

        author.status_delete(posted["id"])
        deleted = eventually(lambda: heard.events("delete"), timeout=30, what="the delete")
        assert [str(d) for d in deleted] == [posted["id"]]
        own = reader.status_post("my own post")  # the reader's own posts are in their home stream too
        eventually(lambda: own["id"] in [u["id"] for u in heard.events("update")], timeout=30, what="own update")
    finally:
        handle.close()
    eventually(lambda: _streams(stack) == 0, timeout=30, what="the closed stream released")


def test_a_revoked_token_ends_the_stream_it_opened(stack: Stack, signup: SignUp) -> None:
    """As Mastodon's streaming server does on a revocation: the stream stops, it does not go on with the victim's
    home timeline (the client, whose token no longer works, cannot open another)."""
    reader, author, heard, handle = _reader_streaming(stack, signup)
    try:
        reader.revoke_access_token()
        eventually(lambda: not handle.is_receiving(), timeout=10, what="the stream ended by the revocation")
        author.status_post("after the revocation")
        assert heard.events("update") == []
    finally:
        handle.close()
    eventually(lambda: _streams(stack) == 0, timeout=30, what="the ended stream released")


def test_a_stop_ends_the_open_streams_at_once_instead_of_waiting_out_the_grace_period(
        stack: Stack, signup: SignUp, processes: Processes) -> None:
    signup("reader")
    heard = Recorder()
    handle = _login(stack, "reader").stream_user(heard, run_async=True, reconnect_async=False)
    try:
        eventually(lambda: heard.heartbeats > 0, timeout=30, what="the stream open")
        api = next(p for p in processes.all if p.name == "api")
        started = time.monotonic()
        assert api.stop(signal.SIGTERM, timeout=10) == 0  # the grace period for requests is 20 s
        assert time.monotonic() - started < 10
        eventually(lambda: not handle.is_receiving(), timeout=10, what="the client saw its stream end")
    finally:
        handle.close()
