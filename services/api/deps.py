"""Request plumbing: the bearer token (checked for shape without I/O), a pooled connection, and the caller.

Everything runs on the event loop (async routes, psycopg's async connections): no thread-pool hop per request.
A verified token is remembered for a short while (authcache.TokenCache, ADR 0032), so a post costs one statement.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import psycopg
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from psycopg_pool import PoolTimeout

from services.api import ratelimit, store, tokens
from services.api.authcache import TokenCache
from services.api.db import Pool
from services.api.problems import ApiError, unauthorized
from services.api.ratelimit import Quota

# Documents the scheme in OpenAPI; the check itself is ours (401 + WWW-Authenticate, never 403).
_bearer = HTTPBearer(auto_error=False, description="the token returned by POST /v1/users")


async def bearer(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> str:
    header = f"{credentials.scheme} {credentials.credentials}" if credentials else None
    token = tokens.bearer_token(header)
    if token is None:
        raise unauthorized("send Authorization: Bearer <token> (the token from POST /v1/users)")
    return token


Token = Annotated[str, Depends(bearer)]


@asynccontextmanager
async def database(request: Request) -> AsyncIterator[store.Conn]:
    """A pooled connection in autocommit mode (writes open explicit transactions); 503 when unavailable."""
    pool: Pool = request.app.state.pool
    try:
        async with pool.connection(timeout=request.app.state.api_settings.pool_timeout) as conn:
            yield conn
    except psycopg.errors.QueryCanceled as exc:  # WALFEED_API_STATEMENT_TIMEOUT (an OperationalError too)
        raise ApiError(503, "the database took longer than this api allows for one request; retry later",
                       "database-timeout", {"Retry-After": "1"}) from exc
    except (PoolTimeout, psycopg.OperationalError) as exc:
        raise ApiError(503, "the database is unavailable; retry later", "database-unavailable",
                       {"Retry-After": "1"}) from exc


async def authenticate(request: Request, db: store.Conn, token: str) -> int:
    """The id of the user whose bearer token this is; 401 otherwise."""
    digest = tokens.token_hash(token)
    cache: TokenCache = request.app.state.token_cache
    user = cache.get(digest)
    if user is not None:
        return user
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
    async with session(request, token) as (db, me):
        await throttle(request, db, request.app.state.api_settings.write_limit, str(me))
        yield db, me


async def throttle(request: Request, db: store.Conn, quota: Quota, subject: str) -> None:
    """Count this request against `quota` for `subject`; 429 with Retry-After when over it. The RateLimit
    header fields go on whatever the response is (middleware.RateLimitHeaders)."""
    if not quota.enabled:
        return
    row = await store.rate_limit_hit(db, quota.key(subject), quota.window, quota.limit)
    decision = ratelimit.decide(quota, row["hits"], row["window_start"], row["now"])
    request.state.rate_limit = decision
    if not decision.allowed:
        raise ApiError(429, f"too many requests: {quota.limit} per {quota.window} s ({quota.policy}); "
                            f"retry in {decision.reset} s", "rate-limited", {"Retry-After": str(decision.reset)})
