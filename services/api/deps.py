"""Request plumbing: the bearer token (checked for shape without I/O), a pooled connection, and the caller.

Database work runs in the route handler's one worker thread: dependencies here do no blocking I/O, so a
request costs one thread-pool hop, not one per dependency.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, cast

import psycopg
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from psycopg_pool import ConnectionPool, PoolTimeout

from services.api import store, tokens
from services.api.problems import ApiError, unauthorized

# Documents the scheme in OpenAPI; the check itself is ours (401 + WWW-Authenticate, never 403).
_bearer = HTTPBearer(auto_error=False, description="the token returned by POST /v1/users")


async def bearer(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> str:
    header = f"{credentials.scheme} {credentials.credentials}" if credentials else None
    token = tokens.bearer_token(header)
    if token is None:
        raise unauthorized("send Authorization: Bearer <token> (the token from POST /v1/users)")
    return token


Token = Annotated[str, Depends(bearer)]


@contextmanager
def database(request: Request) -> Iterator[store.Conn]:
    """A pooled connection in autocommit mode (writes open explicit transactions); 503 when unavailable."""
    pool: ConnectionPool = request.app.state.pool
    try:
        with pool.connection(timeout=request.app.state.api_settings.pool_timeout) as conn:
            conn.autocommit = True
            yield cast(store.Conn, conn)  # make_pool sets row_factory=dict_row
    except (PoolTimeout, psycopg.OperationalError) as exc:
        raise ApiError(503, "the database is unavailable; retry later", "database-unavailable",
                       {"Retry-After": "1"}) from exc


def authenticate(db: store.Conn, token: str) -> int:
    """The id of the user whose bearer token this is; 401 otherwise."""
    row = store.authenticate(db, tokens.token_hash(token))
    if row is None or not tokens.matches(row["token_hash"], token):
        raise unauthorized("the bearer token is not valid")
    return int(row["id"])


@contextmanager
def session(request: Request, token: str) -> Iterator[tuple[store.Conn, int]]:
    """A connection and the authenticated caller's id."""
    with database(request) as db:
        yield db, authenticate(db, token)
