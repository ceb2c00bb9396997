"""Which of this process's live streams an event goes to, decided without I/O (docs/adr/0140).

A stream is one open `GET /api/v1/streaming/user` of one user. The hub keeps, for the users that have at least one
stream here, whom they follow (loaded once when their first stream opens, then kept by the follow events this
process receives), and an index author -> local followers, so routing an event costs a dictionary lookup, not a
query. A stream holds a bounded queue of messages: when a client reads slower than events arrive and its queue is
full, the stream is cut off (`overflowed`), never grows and never slows the others. A stream ends when a token of its
user changes (the revocation listener drives the hub as it drives the token caches).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Message:
    event: str    # Mastodon's event name: update, delete, notification
    data: str     # the SSE data line: a JSON entity, or the deleted status's id


END = Message("", "")  # the stream is over: its reader stops


@dataclass(eq=False)
class Stream:
    user: int
    site: Any  # entities.Site the client connected to (its links are built for it)
    queue: asyncio.Queue[Message]
    notifications: bool = True  # its token covers read:notifications: `notification` events may be written to it
    closed: bool = False  # ended: the client fell too far behind, a source of events was lost, a token changed

    def offer(self, message: Message) -> bool:
        """Queue `message`; False (and the stream is over) when the client fell `maxsize` messages behind."""
        if self.closed:
            return False
        try:
            self.queue.put_nowait(message)
        except asyncio.QueueFull:
            self.closed = True  # the reader finds its queue full, takes a message and sees `closed`
            return False
        return True

    def end(self) -> None:
        """Over: the reader stops after what it is writing now (the client reconnects and reads its timeline)."""
        if not self.closed:
            self.closed = True
            with contextlib.suppress(asyncio.QueueFull):  # full: the reader wakes up anyway
                self.queue.put_nowait(END)


@dataclass
class _Reader:
    streams: list[Stream] = field(default_factory=list)
    followees: set[int] = field(default_factory=set)
    loaded: bool = False  # the followees were read from the database (follow events keep them since)


class Hub:
    def __init__(self) -> None:
        self._readers: dict[int, _Reader] = {}
        self._followers: dict[int, set[int]] = {}  # author -> local users following them

    def __len__(self) -> int:
        return sum(len(r.streams) for r in self._readers.values())

    def holds(self, user: int) -> bool:
        return user in self._readers

    def open(self, stream: Stream) -> bool:
        """Register a stream; True while its user's followees are still to be loaded (`followed`)."""
        reader = self._readers.get(stream.user)
        if reader is None:
            reader = self._readers[stream.user] = _Reader()
        reader.streams.append(stream)
        return not reader.loaded

    def followed(self, user: int, followees: Iterable[int]) -> None:
        """The user's followees as loaded when their first stream opened (added to what follow events brought
        meanwhile)."""
        reader = self._readers.get(user)
        if reader is None:
            return
        reader.loaded = True
        for author in followees:
            self._follow(user, author, reader)

    def close(self, stream: Stream) -> None:
        reader = self._readers.get(stream.user)
        if reader is None or stream not in reader.streams:
            return
        reader.streams.remove(stream)
        if not reader.streams:
            for author in reader.followees:
                followers = self._followers.get(author)
                if followers is not None:
                    followers.discard(stream.user)
                    if not followers:
                        del self._followers[author]
            del self._readers[stream.user]

    def _follow(self, user: int, author: int, reader: _Reader) -> None:
        reader.followees.add(author)
        self._followers.setdefault(author, set()).add(user)

    def follow_changed(self, follower: int, followee: int, *, following: bool) -> None:
        reader = self._readers.get(follower)
        if reader is None:
            return
        if following:
            self._follow(follower, followee, reader)
            return
        reader.followees.discard(followee)
        followers = self._followers.get(followee)
        if followers is not None:
            followers.discard(follower)
            if not followers:
                del self._followers[followee]

    def home_streams(self, author: int) -> list[Stream]:
        """The streams whose home timeline an author's post is in: the author's own and their followers'."""
        users = set(self._followers.get(author, ()))
        if author in self._readers:
            users.add(author)
        return [s for u in users for s in self._readers[u].streams]

    def all_streams(self) -> list[Stream]:
        return [s for r in self._readers.values() for s in r.streams]

    def admits(self, user: int, most: int, most_per_user: int) -> bool:
        """Whether one more stream of `user` stays within `most` streams in all and `most_per_user` of theirs."""
        reader = self._readers.get(user)
        return len(self) < most and (reader is None or len(reader.streams) < most_per_user)

    def within(self, stream: Stream, most: int, most_per_user: int) -> bool:
        """Whether `stream`, just registered (`open`, with no await in between), is within those bounds: requests
        that passed `admits` together, each before its first await, are registered one by one, and the ones beyond
        a bound end here."""
        reader = self._readers.get(stream.user)
        return reader is not None and len(self) <= most and len(reader.streams) <= most_per_user

    def user_streams(self, user: int) -> list[Stream]:
        reader = self._readers.get(user)
        return list(reader.streams) if reader is not None else []

    def forget_user(self, user: int) -> None:
        """A token of `user` changed (revoked or rotated, on any process: revocations.py): their streams here end,
        as Mastodon's streaming server ends a revoked token's; a client whose token still works reconnects."""
        for stream in self.user_streams(user):
            stream.end()

    def listening(self, live: bool) -> None:
        """The token listener (re)connected or was lost: a change may have been missed, so every stream ends (its
        client reconnects and is checked again), as the token caches forget everything (authcache.py)."""
        for stream in self.all_streams():
            stream.end()

    def entries(self) -> int:
        """Follow entries held (memory: about a hundred bytes each in the two indexes)."""
        return sum(len(f) for f in self._followers.values())


def sse(message: Message) -> bytes:
    """One server-sent event: `event:` and `data:` lines (data has no newline: JSON or an id)."""
    return f"event: {message.event}\ndata: {message.data}\n\n".encode()


HEARTBEAT: bytes = b":thump\n\n"
OPENING: bytes = b":)\n\n"
