"""`GET /api/v1/streaming/user`: server-sent events of the caller's home timeline (`update`: a status, `delete`:
a status id) and notifications (`notification`), with a `:thump` comment as heartbeat on an idle stream
(docs/mastodon.md, docs/adr/0140). `/api/v1/streaming/user/notification` sends the notifications only;
`/api/v1/streaming?stream=user` is the same as the first. The token comes in the Authorization header or, as
Mastodon's streaming server allows, the `access_token` query parameter."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from prometheus_client import Gauge

from services.api import tokens
from services.api.deps import database
from services.api.mastodon import feed as feeds
from services.api.mastodon import views
from services.api.mastodon.auth import require, resolve
from services.api.mastodon.errors import MastodonError, unauthorized
from services.api.mastodon.feed import LiveFeed
from services.api.mastodon.streamhub import END, HEARTBEAT, OPENING, Stream, sse

router = APIRouter(include_in_schema=False)
_HEADERS: Final = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def _token(request: Request) -> str:
    token = tokens.bearer_token(request.headers.get("authorization"))
    if token is None:
        query = request.query_params.get("access_token")
        if query and len(query) <= tokens.MAX_TOKEN_CHARS and query.isascii():
            token = query
    if token is None:
        raise unauthorized("The access token is invalid")
    return token


@router.get("/api/v1/streaming/health")
async def health() -> Response:
    return Response(b"OK", media_type="text/plain")


@router.get("/api/v1/streaming/user")
@router.get("/api/v1/streaming/user/notification")
@router.get("/api/v1/streaming")
async def user_stream(request: Request) -> Response:
    if request.url.path == "/api/v1/streaming" and request.query_params.get("stream") not in (
            "user", "user:notification"):
        raise MastodonError(400, "Unknown stream type: only user and user:notification are served here")
    only_notifications = request.url.path.endswith("/notification") or \
        request.query_params.get("stream") == "user:notification"
    token = _token(request)
    async with database(request) as db:
        me = require(await resolve(request, db, token), "read:statuses")
    feed: LiveFeed = request.app.state.mastodon_feed
    api = request.app.state.api_settings
    if len(feed.hub) >= api.streams_max:
        raise MastodonError(503, f"this server holds {api.streams_max} streams already; retry later",
                            {"Retry-After": "5"})
    if not await feed.ready():
        raise MastodonError(503, "the live stream is unavailable; retry later", {"Retry-After": "5"})
    stream = Stream(me, views.site(request), asyncio.Queue(maxsize=api.stream_buffer))
    return StreamingResponse(_events(request, feed, stream, only_notifications), media_type="text/event-stream",
                             headers=_HEADERS)


async def _events(request: Request, feed: LiveFeed, stream: Stream, only_notifications: bool) -> AsyncIterator[bytes]:
    """Registered with the hub here, where `finally` is sure to run (a response never started runs none of it)."""
    gauge: Gauge = request.app.state.mastodon_streams
    heartbeat: float = request.app.state.api_settings.stream_heartbeat
    gauge.inc()
    unloaded = feed.hub.open(stream)
    try:
        if unloaded and not only_notifications:
            feed.hub.followed(stream.user, await feeds.followees(request.app.state.pool, stream.user))
        yield OPENING
        while True:
            try:
                async with asyncio.timeout(heartbeat):
                    message = await stream.queue.get()
            except TimeoutError:
                yield HEARTBEAT
                continue
            if message is END or stream.closed:
                return
            if only_notifications and message.event != "notification":
                continue
            yield sse(message)
    finally:
        feed.hub.close(stream)
        gauge.dec()
