"""Who calls a Mastodon route and what they may do: the bearer token is an api token (POST /v1/users, every
scope) or an OAuth access token (its scopes). Verified grants are remembered per process for a short while, as
the api's tokens are (authcache.py, ADR 0035): the revocation listener makes this cache forget a user whose token
was revoked, and while it is not connected nothing is served from here either."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final, TypeVar

from fastapi import Request
from starlette.requests import HTTPConnection

from services.api import oauth, tokens
from services.api import store as api_store
from services.api.deps import database, database_errors, within_write_limit
from services.api.mastodon import store
from services.api.mastodon.errors import MastodonError, unauthorized
from services.api.replica import Replica
from services.api.ttlmap import TtlMap

T = TypeVar("T")
MAX_ENTRIES: Final = 10_000


@dataclass(frozen=True, slots=True)
class Grant:
    user: int | None  # None: a client_credentials token (an app, no account)
    scopes: frozenset[str]


class GrantCache:
    """sha256(token) -> Grant, with TokenCache's rules (authcache.py): only database-confirmed grants, dropped on a
    change of the user's tokens, nothing served while the listener is down."""

    def __init__(self, ttl: float, max_entries: int = MAX_ENTRIES, clock: Callable[[], float] = time.monotonic):
        self._entries: TtlMap[bytes, Grant] = TtlMap(ttl, max_entries, clock)
        self.generation = 0
        self.live = False

    def get(self, digest: bytes) -> Grant | None:
        return self._entries.get(digest)

    def put(self, digest: bytes, grant: Grant, generation: int) -> None:
        if self.live and generation == self.generation and grant.user is not None:
            self._entries.put(digest, grant)

    def forget_user(self, user: int) -> None:
        self.generation += 1
        self._entries.discard_values(lambda grant: grant.user == user)

    def listening(self, live: bool) -> None:
        self.generation += 1
        self.live = live
        self._entries.clear()


def bearer(request: Request) -> str:
    token = tokens.bearer_token(request.headers.get("authorization"))
    if token is None:
        raise unauthorized("The access token is invalid")
    return token


async def resolve(request: HTTPConnection, db: api_store.Conn, token: str) -> Grant:
    digest = tokens.token_hash(token)
    cache: GrantCache = request.app.state.mastodon_grants
    found = cache.get(digest)
    if found is not None:
        return found
    generation = cache.generation
    row = await store.grant(db, digest)
    if row is None or not tokens.matches(row["token_hash"], token):
        raise unauthorized("The access token is invalid")
    grant = Grant(None if row["user_id"] is None else int(row["user_id"]),
                  oauth.ALL if row["scopes"] is None else frozenset(row["scopes"]))
    cache.put(digest, grant, generation)
    return grant


def require(grant: Grant, scope: str) -> int:
    """The caller's user id when the grant covers `scope` (403 otherwise; 422 for an app token without user)."""
    if not oauth.covers(grant.scopes, scope):
        raise MastodonError(403, "This action is outside the authorized scopes")
    if grant.user is None:
        raise MastodonError(422, "This method requires an authenticated user")
    return grant.user


@asynccontextmanager
async def session(request: Request, scope: str) -> AsyncIterator[tuple[api_store.Conn, int]]:
    """A primary connection and the caller, whose token covers `scope`."""
    token = bearer(request)
    async with database(request) as db:
        yield db, require(await resolve(request, db, token), scope)


@asynccontextmanager
async def write_session(request: Request, scope: str) -> AsyncIterator[tuple[api_store.Conn, int]]:
    """As session, within the per-user write limit (the api's own, shared with /v1 writes)."""
    async with session(request, scope) as (db, me), within_write_limit(request, db, me):
        yield db, me


async def read(request: Request, scope: str, work: Callable[[api_store.Conn, int], Awaitable[T]]) -> T:
    """`work(connection, caller)` on the read replica when there is one and it has replayed the caller's last
    write through this process (deps.read's rule), else on the primary; the token is checked on the primary."""
    replica: Replica | None = request.app.state.replica
    if replica is None:
        async with session(request, scope) as (db, me):
            return await work(db, me)
    token = bearer(request)
    digest = tokens.token_hash(token)
    grant = request.app.state.mastodon_grants.get(digest)
    if grant is None:
        async with database(request) as primary:
            grant = await resolve(request, primary, token)
    me = require(grant, scope)

    async def on_primary() -> T:
        async with database(request) as db:
            return await work(db, me)

    with database_errors():
        return await replica.run(None, replica.memory.get(me), lambda db: work(db, me), on_primary)


@asynccontextmanager
async def anonymous(request: Request) -> AsyncIterator[api_store.Conn]:
    async with database(request) as db:
        yield db
