"""Request dependencies: a pooled connection per request and the authenticated caller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, cast

import psycopg
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from psycopg_pool import ConnectionPool, PoolTimeout

from services.api import store, tokens
from services.api.problems import ApiError, unauthorized

# Documents the scheme in OpenAPI; the check itself is ours (401 + WWW-Authenticate, never 403).
_bearer = HTTPBearer(auto_error=False, description="the token returned by POST /v1/users")


def pool(request: Request) -> ConnectionPool:
    return request.app.state.pool  # type: ignore[no-any-return]


def connection(request: Request) -> Iterator[store.Conn]:
    try:
        with pool(request).connection(timeout=request.app.state.api_settings.pool_timeout) as conn:
            conn.autocommit = True  # writes open explicit transactions
            yield cast(store.Conn, conn)  # make_pool sets row_factory=dict_row
    except (PoolTimeout, psycopg.OperationalError) as exc:
        raise ApiError(503, "the database is unavailable; retry later", "database-unavailable",
                       {"Retry-After": "1"}) from exc


Db = Annotated[store.Conn, Depends(connection)]


def caller(db: Db, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> int:
    """The id of the user whose bearer token this is; 401 otherwise."""
    header = f"{credentials.scheme} {credentials.credentials}" if credentials else None
    token = tokens.bearer_token(header)
    if token is None:
        raise unauthorized("send Authorization: Bearer <token> (the token from POST /v1/users)")
    row = store.authenticate(db, tokens.token_hash(token))
    if row is None or not tokens.matches(row["token_hash"], token):
        raise unauthorized("the bearer token is not valid")
    return int(row["id"])


Caller = Annotated[int, Depends(caller)]
