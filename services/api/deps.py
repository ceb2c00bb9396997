"""Request plumbing: the bearer token (checked for shape without I/O), a pooled connection, and the caller.

Everything runs on the event loop (async routes, psycopg's async connections): no thread-pool hop per request.
A verified token is remembered for a short while (authcache.TokenCache, ADR 0032), so a post costs one statement.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Annotated, TypeVar

import psycopg
from fastapi import Depends, Header, Request
from fastapi.security import HTTPBearer
from psycopg_pool import PoolTimeout

from services.api import ratelimit, readafter, store, tokens
from services.api.authcache import TokenCache
from services.api.db import Lease
from services.api.problems import ApiError, unauthorized
from services.api.ratelimit import Quota
from services.api.replica import Replica

T = TypeVar("T")

class _Bearer(HTTPBearer):
    """Documents the scheme in OpenAPI as FastAPI's HTTPBearer does; the check itself is ours (401 +
    WWW-Authenticate, never 403), in this one dependency (not HTTPBearer's and a second one on its result)."""

    async def __call__(self, request: Request) -> str:  # type: ignore[override]
        token = tokens.bearer_token(request.headers.get("authorization"))
        if token is None:
            raise unauthorized("send Authorization: Bearer <token> (the token from POST /v1/users)")
        return token


bearer = _Bearer(auto_error=False, scheme_name="HTTPBearer", description="the token returned by POST /v1/users")
Token = Annotated[str, Depends(bearer)]


def unavailable(error: BaseException) -> ApiError | None:
    """The 503 problem of a failure of the database or the pool, or None for any other error."""
    if isinstance(error, psycopg.errors.QueryCanceled):  # WALFEED_API_STATEMENT_TIMEOUT (an OperationalError too)
        return ApiError(503, "the database took longer than this api allows for one request; retry later",
                        "database-timeout", {"Retry-After": "1"})
    if isinstance(error, PoolTimeout | psycopg.OperationalError):
        return ApiError(503, "the database is unavailable; retry later", "database-unavailable",
                        {"Retry-After": "1"})
    return None


@contextmanager
def database_errors() -> Iterator[None]:
    """The database's failures as 503 problems."""
    try:
        yield
    except Exception as exc:
        if (problem := unavailable(exc)) is not None:
            raise problem from exc
        raise


def database(request: Request) -> Lease:
    """`async with database(request) as db`: a pooled connection to the primary in autocommit mode (writes open
    explicit transactions); 503 when unavailable."""
    return Lease(request.app.state.pool, request.app.state.api_settings.pool_timeout, unavailable)


async def authenticate(request: Request, db: store.Conn | None, token: str) -> int:
    """The id of the user whose bearer token this is; 401 otherwise. Without `db`, a cache miss takes a
    connection to the primary for the lookup."""
    digest = tokens.token_hash(token)
    cache: TokenCache = request.app.state.token_cache
    user = cache.get(digest)
    if user is not None:
        return user
    if db is None:
        async with database(request) as primary:
            return await authenticate(request, primary, token)
    generation = cache.generation  # a token change seen after this drops the fill below
    row = await store.authenticate(db, digest)
    if row is None or not tokens.matches(row["token_hash"], token):
        raise unauthorized("the bearer token is not valid")
    cache.put(digest, int(row["id"]), generation)
    return int(row["id"])


@asynccontextmanager
async def session(request: Request, token: str) -> AsyncIterator[tuple[store.Conn, int]]:
    """A connection and the authenticated caller's id."""
    async with database(request) as db:
        yield db, await authenticate(request, db, token)


@asynccontextmanager
async def write_session(request: Request, token: str) -> AsyncIterator[tuple[store.Conn, int]]:
    """A session whose caller is within the per-user write limit (429 otherwise)."""
    async with session(request, token) as (db, me), within_write_limit(request, db, me):
        yield db, me


@asynccontextmanager
async def within_write_limit(request: Request, db: store.Conn, me: int) -> AsyncIterator[None]:
    """Around a write of `me`'s: the per-user write limit first (429 over it), the replica bookkeeping after."""
    await throttle(request, db, request.app.state.api_settings.write_limit, str(me))
    yield
    await written(request, db, me)


async def written(request: Request, db: store.Conn, user: int) -> None:
    """After a write that committed on `db`, with a read replica: its position goes back in the WalFeed-Read-After
    header (middleware.Edge) and into this process's memory of the user's writes (docs/adr/0092)."""
    replica: Replica | None = request.app.state.replica
    if replica is not None:
        request.state.read_after = readafter.format_lsn(await replica.written(db, user))


ReadAfterHeader = Annotated[str | None, Header(
    alias=readafter.HEADER, max_length=64,
    description="the value of this header on the response to one of your writes, e.g. 16/B374D848: this read "
                "then sees that write (docs/api.md, read replicas); any other value is a 400")]


def read_after(value: str | None) -> int | None:
    """The position a read must see, from the header (400 `invalid-read-after` when it is not one)."""
    try:
        return None if value is None else readafter.parse(value)
    except readafter.InvalidToken as exc:
        raise ApiError(400, str(exc), "invalid-read-after") from None


# The header itself, parsed by `read`: a parameter of the route, not a dependency of its own (solving a
# sub-dependency costs FastAPI about 40 us a request, a tenth of a timeline read: docs/adr/0096).
ReadAfter = ReadAfterHeader


async def read(request: Request, token: str, after_header: str | None,
               work: Callable[[store.Conn, int], Awaitable[T]]) -> T:
    """`work(connection, caller)` for a read a replica may answer: on the replica once it has replayed what the
    caller must see (`after_header`, their WalFeed-Read-After token, or their last write through this process),
    else on the primary. Without a replica, on the primary as every other request. The token is checked on the
    primary."""
    after = read_after(after_header)
    replica: Replica | None = request.app.state.replica
    if replica is None:
        async with database(request) as db:
            return await work(db, await authenticate(request, db, token))
    me = await authenticate(request, None, token)

    async def on_primary() -> T:
        async with database(request) as db:
            return await work(db, me)

    with database_errors():
        return await replica.run(after, replica.memory.get(me), lambda db: work(db, me), on_primary)


async def throttle(request: Request, db: store.Conn, quota: Quota, subject: str) -> None:
    """Count this request against `quota` for `subject`; 429 with Retry-After when over it. The RateLimit
    header fields go on whatever the response is (middleware.Edge)."""
    if not quota.enabled:
        return
    admit(request, quota, await store.rate_limit_hit(db, quota.key(subject), quota.window, quota.limit))


def admit(request: Request, quota: Quota, hit: store.Row) -> None:
    """The decision on a request the database counted (`hit`: store.rate_limit_hit's row); 429 when over."""
    decision = ratelimit.decide(quota, hit["hits"], hit["window_start"], hit["now"])
    request.state.rate_limit = decision
    if not decision.allowed:
        raise ApiError(429, f"too many requests: {quota.limit} per {quota.window} s ({quota.policy}); "
                            f"retry in {decision.reset} s", "rate-limited", {"Retry-After": str(decision.reset)})
