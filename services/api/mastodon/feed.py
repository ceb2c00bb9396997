"""Where this api process's live streams get their events (docs/adr/0140): from the pipeline, never by polling
the database per client. The two sources are stream_queue.py and notices.py; this module routes what they bring
(streamhub.Hub) and reads the rows an event names.

- Posts and follows: the events exchange (`{prefix}.events`, every event the relay published, one a message)
  through a queue of this process's own (`{prefix}.stream.<random>`, exclusive, auto-delete: it lives as long as
  the connection), bound to `post.created`, `post.deleted`, `follow.created` and `follow.deleted`. Every api
  process has one, so each gets every such event and routes it to the streams it holds (streamhub.Hub). One
  post costs one read of the post (and its author, cached) per process that holds a stream it goes to, whatever
  the number of those streams.
- Notifications: Postgres LISTEN on `walfeed_notification`, which a trigger on `notifications` NOTIFYs
  (db/init/021_mastodon.sql) when the notifier's transaction commits; the notification is read once per process
  that holds a stream of its recipient.

Started with the first stream a process opens, so an api without streams has no broker connection. While either
source is down nothing is promised: the streams open then are ended (the client reconnects and reads its timeline
for what it missed), and new ones wait for both (503 when they do not come within READY_SECONDS).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from types import FrameType
from typing import Any, Final

import orjson

from services.api import db as api_db
from services.api.mastodon import entities, notices, store, views
from services.api.mastodon.stream_queue import StreamQueue
from services.api.mastodon.streamhub import Hub, Message
from services.api.store import Row
from services.api.ttlmap import TtlMap
from services.core import backoff, events
from services.core.settings import Settings

log = logging.getLogger(__name__)

READY_SECONDS: Final = 5.0
VISIBLE_TRIES: Final = 10  # reads of a post its event named, within about a second, before giving up on it


class LiveFeed:
    def __init__(self, settings: Settings, pool: api_db.Pool, accounts: TtlMap[int, Row], hub: Hub,
                 options: str = "") -> None:
        self._settings = settings
        self._pool = pool
        self._accounts = accounts
        self.hub = hub
        self._options = options
        self._queue: StreamQueue | None = None
        self._listener: asyncio.Task[None] | None = None
        self._broker_up = asyncio.Event()
        self._listener_up = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        self._previous_sigterm: Any = None

    async def ready(self) -> bool:
        """Start the sources on first use; True once both are up (within READY_SECONDS)."""
        if self._closing:
            return False
        if self._queue is None:
            self._queue = StreamQueue(self._settings, asyncio.get_running_loop(), self._apply, self._broker_changed)
            self._queue.start()
            self._listener = asyncio.create_task(notices.listen(
                self._settings.database_url, self._options, self._notified, self._listener_changed))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(READY_SECONDS):
                await self._broker_up.wait()
                await self._listener_up.wait()
        return self._broker_up.is_set() and self._listener_up.is_set()

    def stopping(self) -> None:
        """The process was told to stop (SIGTERM): end every open stream now, so that the server's graceful stop
        does not wait its whole grace period for connections that never finish by themselves; new streams are
        refused from here on."""
        self._closing = True
        self._end_all()

    def end_streams_on_sigterm(self) -> None:
        """SIGTERM ends the open streams at once, then does what it did before (the server's graceful stop, which
        held streams would otherwise keep waiting for its whole grace period). Undone by stop()."""
        loop = asyncio.get_running_loop()
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing is open any more
                loop.call_soon_threadsafe(self.stopping)
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.raise_signal(signal.SIGTERM)

        with contextlib.suppress(ValueError):  # not the main thread (an app served in a test's thread)
            signal.signal(signal.SIGTERM, on_sigterm)
            self._previous_sigterm = previous

    async def stop(self) -> None:
        if self._previous_sigterm is not None:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGTERM, self._previous_sigterm)
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        if self._queue is not None:
            await self._queue.stop()
        for stream in self.hub.all_streams():
            stream.end()

    # On the event loop.

    def _broker_changed(self, up: bool) -> None:
        if up:
            self._broker_up.set()
            return
        if self._broker_up.is_set():
            self._broker_up.clear()
            self._end_all()

    def _end_all(self) -> None:
        for stream in self.hub.all_streams():
            stream.end()

    def _apply(self, event: events.Event) -> None:
        payload = event.payload
        if event.type in (events.FOLLOW_CREATED, events.FOLLOW_DELETED):
            self.hub.follow_changed(payload["follower_id"], payload["followee_id"],
                                    following=event.type == events.FOLLOW_CREATED)
            return
        streams = self.hub.home_streams(payload["author_id"])
        if not streams:
            return
        if event.type == events.POST_DELETED:
            for stream in streams:
                stream.offer(Message("delete", str(payload["post_id"])))
            return
        self._spawn(self._post_created(payload["post_id"]))

    def _spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("stream feed could not read an event's rows", extra={"error": repr(task.exception())})

    async def _post_created(self, post_id: int) -> None:
        for attempt in range(1, VISIBLE_TRIES + 1):
            async with self._pool.connection() as db:
                row = await store.post_for_stream(db, post_id)
                if row is not None:
                    author = (await views.account_rows(self._accounts, db, [int(row["author_id"])])).get(
                        int(row["author_id"]))
                    break
            # decoded from the WAL a moment before its commit is visible to this session: read it again shortly
            await asyncio.sleep(backoff.delay(attempt, 0.005, 0.2))
        else:
            log.warning("stream feed never saw a post its event named", extra={"post_id": post_id})
            return
        if row["deleted"] or author is None:
            return  # deleted meanwhile: its delete event follows
        by_site: dict[Any, str] = {}
        for stream in self.hub.home_streams(int(row["author_id"])):  # again: streams may have come or gone
            if stream.site not in by_site:
                by_site[stream.site] = orjson.dumps(entities.status(
                    row, entities.account(author, stream.site), stream.site)).decode()
            stream.offer(Message("update", by_site[stream.site]))

    # Notifications.

    def _listener_changed(self, up: bool) -> None:
        if up:
            self._listener_up.set()
        elif self._listener_up.is_set():
            self._listener_up.clear()
            self._end_all()

    def _notified(self, payload: str) -> None:
        recipient, _, notification = payload.partition(":")
        if not (recipient.isdigit() and notification.isdigit()) or not self.hub.holds(int(recipient)):
            return
        self._spawn(self._notification(int(recipient), int(notification)))

    async def _notification(self, recipient: int, notification_id: int) -> None:
        async with self._pool.connection() as db:
            row = await store.notification(db, recipient, notification_id)
            if row is None:
                return
            streams = self.hub.user_streams(recipient)
            by_site: dict[Any, str] = {}
            for stream in streams:
                if stream.site not in by_site:
                    found = await views.notifications_for(self._accounts, db, [row], stream.site)
                    by_site[stream.site] = orjson.dumps(found[0]).decode() if found else ""
                if by_site[stream.site]:
                    stream.offer(Message("notification", by_site[stream.site]))


async def followees(pool: api_db.Pool, user: int) -> list[int]:
    async with pool.connection() as db:
        return await store.followees(db, user)
