"""Paced writers through the api: one thread, one event loop (uvloop when installed), many keep-alive connections.

A thread per HTTP writer costs the load generator more CPU than the api spends per post, and on a 2-core machine
dozens of runnable threads take the api's turns on the CPU. Here one loop drives `connections` raw HTTP/1.1
keep-alive connections, each taking the next due post (the same schedule as bench/lib/e2e.py's SQL writers: never
early, late ones go at once, none after the schedule's end). The commit time of a post is when its 201 response
arrives. A failed request (any other status, a closed connection) counts in `book.errors` and its connection is
opened again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import threading
import time
from collections.abc import Iterator

from bench.lib.e2e import Book, schedule_end
from bench.lib.infra import token
from bench.lib.stats import send_time


def request(author: int, n: int, floor: bool = False) -> bytes:
    """The api's POST /v1/posts as the author, or with `floor` the floor app's POST /posts?author= (bench/floor_app.py:
    the same insert, no auth)."""
    body = json.dumps({"body": f"bench post {n}"}).encode()
    target = f"/posts?author={author}" if floor else "/v1/posts"
    auth = "" if floor else f"Authorization: Bearer {token(author)}\r\n"
    return (f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def content_length(head: bytes) -> int:
    for header in head.split(b"\r\n")[1:]:
        name, _, value = header.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


async def _post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, author: int, n: int,
                floor: bool) -> int | None:
    """The post's id, or None when the api did not answer 201."""
    writer.write(request(author, n, floor))
    head = await reader.readuntil(b"\r\n\r\n")
    body = await reader.readexactly(content_length(head))
    return int(json.loads(body)["id"]) if head.startswith(b"HTTP/1.1 201") else None


async def _connection(port: int, book: Book, authors: int, rate: float, total: int, numbers: Iterator[int],
                      started: float, stop: threading.Event, rng: random.Random, floor: bool) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for n in numbers:  # shared by every connection: each takes the next post
            if n >= total or stop.is_set() or time.monotonic() > schedule_end(started, total, rate):
                return
            wait = started + send_time(n, rate) - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # pacing of the load generator
            author = rng.randint(1, authors)
            try:
                post_id = await _post(reader, writer, author, n, floor)
            except (OSError, asyncio.IncompleteReadError, ValueError):
                post_id = None
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            if post_id is None:
                with book.lock:
                    book.errors += 1
            else:
                book.commit(post_id, time.monotonic())
    finally:
        writer.close()


async def _all(port: int, connections: int, book: Book, authors: int, rate: float, total: int, started: float,
               stop: threading.Event, floor: bool) -> None:
    numbers, rng = itertools.count(), random.Random(0)
    await asyncio.gather(*(_connection(port, book, authors, rate, total, numbers, started, stop, rng, floor)
                           for _ in range(connections)))


def writer(port: int, connections: int, floor: bool, book: Book, authors: int, rate: float, total: int, _index: int,
           _writers: int, started: float, stop: threading.Event, done: threading.Barrier) -> None:
    """e2e.Write for the api (or with `floor` the floor app): run it as the only writer (writers=1); it opens
    `connections` connections."""
    main = _all(port, connections, book, authors, rate, total, started, stop, floor)
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)
    with contextlib.suppress(threading.BrokenBarrierError):
        done.wait(60)
