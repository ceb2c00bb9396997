"""`GET /api/v1/streaming/user`: server-sent events of the caller's home timeline (`update`: a status, `delete`:
a status id) and notifications (`notification`), with a `:thump` comment as heartbeat on an idle stream
(docs/mastodon.md, docs/adr/0140). `/api/v1/streaming/user/notification` sends the notifications only;
`/api/v1/streaming?stream=user` is the same as the first. The token comes in the Authorization header or, as
Mastodon's streaming server allows, the `access_token` query parameter.

The same stream over a WebSocket (`/api/v1/streaming`, as masto.js and web apps use it): the token as the
`access_token` parameter or the WebSocket subprotocol (echoed back), then `{"type": "subscribe", "stream":
"user"}` (or `user:notification`); each event is `{"stream": ["user"], "event": ..., "payload": ...}` with the
entity as a JSON string (the id for `delete`), as Mastodon sends them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final

import orjson
from fastapi import APIRouter, Request, Response, WebSocket, WebSocketDisconnect
from fastapi.responses import StreamingResponse
from prometheus_client import Gauge

from services.api import tokens
from services.api.deps import database
from services.api.mastodon import feed as feeds
from services.api.mastodon import views
from services.api.mastodon.auth import Grant, require, resolve
from services.api.mastodon.errors import MastodonError, unauthorized
from services.api.mastodon.feed import LiveFeed
from services.api.mastodon.streamhub import END, HEARTBEAT, OPENING, Stream, sse
from services.api.oauth import covers

router = APIRouter(include_in_schema=False)
_HEADERS: Final = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
STATUSES: Final = "read:statuses"
NOTIFICATIONS: Final = "read:notifications"


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
        grant = await resolve(request, db, token)
    # as Mastodon's streaming server: the user stream needs read:statuses and carries notifications only for a
    # token that covers read:notifications, which is what the notification stream needs
    me = require(grant, NOTIFICATIONS if only_notifications else STATUSES)
    feed: LiveFeed = request.app.state.mastodon_feed
    api = request.app.state.api_settings
    _admit(feed, me, api.streams_max, api.streams_per_user)
    if not await feed.ready():
        raise MastodonError(503, "the live stream is unavailable; retry later", {"Retry-After": "5"})
    stream = Stream(me, views.site(request), asyncio.Queue(maxsize=api.stream_buffer),
                    notifications=covers(grant.scopes, NOTIFICATIONS))
    return StreamingResponse(_events(request, feed, stream, only_notifications), media_type="text/event-stream",
                             headers=_HEADERS)


def _admit(feed: LiveFeed, me: int, most: int, most_per_user: int) -> None:
    """503 when this process holds `most` streams, 429 when the user holds `most_per_user` of them here."""
    if feed.hub.admits(me, most, most_per_user):
        return
    if len(feed.hub) >= most:
        raise MastodonError(503, f"this server holds {most} streams already; retry later", {"Retry-After": "5"})
    raise MastodonError(429, f"you hold {most_per_user} streams on this server already: close one first",
                        {"Retry-After": "5"})


async def _events(request: Request, feed: LiveFeed, stream: Stream, only_notifications: bool) -> AsyncIterator[bytes]:
    """Registered with the hub here, where `finally` is sure to run (a response never started runs none of it)."""
    gauge: Gauge = request.app.state.mastodon_streams
    api = request.app.state.api_settings
    heartbeat: float = api.stream_heartbeat
    counted = False
    unloaded = feed.hub.open(stream)
    try:
        if not feed.hub.within(stream, api.streams_max, api.streams_per_user):
            return  # admitted together with others beyond a bound: this one ends at once (the client retries)
        if unloaded and not only_notifications:
            feed.hub.followed(stream.user, await feeds.followees(request.app.state.pool, stream.user))
        gauge.inc()
        counted = True
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
            if (message.event != "notification" and only_notifications) or \
                    (message.event == "notification" and not stream.notifications):
                continue
            yield sse(message)
    finally:
        feed.hub.close(stream)
        if counted:
            gauge.dec()


async def _grant(connection: WebSocket, token: str) -> Grant | None:
    """The token's grant when it is a user's and covers one of the streams; None otherwise."""
    try:
        async with connection.app.state.pool.connection(timeout=connection.app.state.api_settings.pool_timeout) as db:
            grant = await resolve(connection, db, token)
    except MastodonError:
        return None
    if grant.user is None or not (covers(grant.scopes, STATUSES) or covers(grant.scopes, NOTIFICATIONS)):
        return None
    return grant


@router.websocket("/api/v1/streaming")
async def web_socket_stream(websocket: WebSocket) -> None:
    offered = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
    query = websocket.query_params.get("access_token")
    token = query if query and len(query) <= tokens.MAX_TOKEN_CHARS and query.isascii() else None
    subprotocol = None
    if token is None and offered and len(offered[0]) <= tokens.MAX_TOKEN_CHARS and offered[0].isascii():
        token = subprotocol = offered[0]
    grant = None if token is None else await _grant(websocket, token)
    feed: LiveFeed = websocket.app.state.mastodon_feed
    api = websocket.app.state.api_settings
    if grant is None or grant.user is None:
        await websocket.close(code=4001, reason="The access token is invalid")
        return
    me = grant.user
    if not feed.hub.admits(me, api.streams_max, api.streams_per_user) or not await feed.ready():
        await websocket.close(code=1013, reason="the live stream is unavailable; retry later")
        return
    await websocket.accept(subprotocol=subprotocol)
    stream = Stream(me, views.site(websocket), asyncio.Queue(maxsize=api.stream_buffer),
                    notifications=covers(grant.scopes, NOTIFICATIONS))
    subscribed = Subscriptions(statuses=covers(grant.scopes, STATUSES), notifications=stream.notifications)
    gauge: Gauge = websocket.app.state.mastodon_streams
    counted = False
    unloaded = feed.hub.open(stream)
    try:
        if not feed.hub.within(stream, api.streams_max, api.streams_per_user):
            await websocket.close(code=1013, reason="the live stream is unavailable; retry later")
            return
        if unloaded:  # before the stream counts as open: from then on a followed author's post reaches it
            feed.hub.followed(me, await feeds.followees(websocket.app.state.pool, me))
        gauge.inc()
        counted = True
        async with asyncio.TaskGroup() as group:
            reader = group.create_task(_subscriptions(websocket, subscribed))
            writer = group.create_task(_frames(websocket, stream, subscribed))
            await asyncio.wait([reader, writer], return_when=asyncio.FIRST_COMPLETED)
            reader.cancel()
            writer.cancel()
    except* (WebSocketDisconnect, RuntimeError, OSError):
        pass
    finally:
        feed.hub.close(stream)
        if counted:
            gauge.dec()


class Subscriptions(set[str]):
    """The streams a WebSocket client subscribed to; `first` is set by its first subscription: events from the
    accept on wait in the stream's queue until then, so a post made right after subscribing is not missed.
    `statuses`, `notifications`: what the token's scopes cover (read:statuses, read:notifications)."""

    def __init__(self, statuses: bool = True, notifications: bool = True) -> None:
        super().__init__()
        self.first = asyncio.Event()
        self.statuses, self.notifications = statuses, notifications

    def allows(self, name: str) -> bool:
        return self.statuses if name == "user" else self.notifications


async def _subscriptions(websocket: WebSocket, subscribed: Subscriptions) -> None:
    """What the client subscribes to (user, user:notification); anything else is answered with an error."""
    while True:
        text = await websocket.receive_text()
        try:
            message = orjson.loads(text)
        except orjson.JSONDecodeError:
            message = None
        if not isinstance(message, dict) or message.get("type") not in ("subscribe", "unsubscribe"):
            await websocket.send_text('{"error":"Unknown message: send subscribe or unsubscribe"}')
            continue
        name = message.get("stream")
        if name not in ("user", "user:notification"):
            await websocket.send_text('{"error":"Unknown stream type: only user and user:notification"}')
            continue
        if message["type"] == "subscribe" and not subscribed.allows(name):
            await websocket.send_text('{"error":"Access token does not have the required scopes","status":401}')
            continue
        if message["type"] == "subscribe":
            subscribed.add(name)
            subscribed.first.set()
        else:
            subscribed.discard(name)


async def _frames(websocket: WebSocket, stream: Stream, subscribed: Subscriptions) -> None:
    await subscribed.first.wait()
    while True:
        message = await stream.queue.get()
        if message is END or stream.closed:
            await websocket.close(code=1011, reason="the stream fell behind or lost its source: reconnect")
            return
        if message.event == "notification" and not subscribed.notifications:
            continue
        for name in ("user", "user:notification"):
            if name in subscribed and (name == "user" or message.event == "notification"):
                await websocket.send_text(orjson.dumps({"stream": [name], "event": message.event,
                                                        "payload": message.data}).decode())
                break
