"""Sign-up, profiles, following."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from services.api import ratelimit, store, tokens
from services.api.deps import ReadAfter, Token, database, read, throttle, write_session, written
from services.api.models import CreatedUser, Me, MeUpdate, NewToken, NewUser, User
from services.api.problems import ApiError
from services.api.routes import (
    AUTH,
    BAD_TOKEN,
    BODY,
    INVALID,
    LIMITED,
    NOT_FOUND,
    UNAVAILABLE,
    Id,
    invalid,
    outbox_trace,
)
from services.core.feed import MAX_FOLLOWING

router = APIRouter(prefix="/v1", responses={**INVALID, **UNAVAILABLE})


@router.post("/users", status_code=201, response_model=CreatedUser, tags=["users"],
             responses={**BODY, **LIMITED, 409: {"description": "the handle is taken (handle-taken)"}})
async def create_user(new: NewUser, request: Request) -> CreatedUser:
    """Sign up. The token in the reply is the only copy: only its hash is stored."""
    token = tokens.new_token()
    client = ratelimit.client_subject(request.client.host if request.client else None)
    async with database(request) as db:
        await throttle(request, db, request.app.state.api_settings.signup_limit, client)
        row = await store.create_user(db, new.handle, tokens.token_hash(token))
        if row is not None:
            await written(request, db, row["id"])
    if row is None:
        raise ApiError(409, f"the handle {new.handle!r} is taken", "handle-taken")
    return CreatedUser(id=row["id"], handle=row["handle"], token=token)


@router.post("/users/me/token", response_model=NewToken, tags=["users"], responses={**AUTH, **LIMITED})
async def rotate_token(token: Token, request: Request) -> NewToken:
    """Replace the caller's token: the reply holds the new one (its only copy); the old one stops working at once
    on this process and within ADR 0035's bound on every other."""
    new = tokens.new_token()
    async with write_session(request, token) as (db, me):
        await store.set_token(db, me, tokens.token_hash(new))
    request.app.state.token_cache.forget_user(me)
    return NewToken(token=new)


@router.delete("/users/me/token", status_code=204, response_class=Response, tags=["users"],
               responses={**AUTH, **LIMITED})
async def revoke_token(token: Token, request: Request) -> Response:
    """Revoke the caller's token, leaving the account without one: nothing can act as it any more (there is no
    other credential to get a new token with). To replace a leaked token, rotate it instead."""
    async with write_session(request, token) as (db, me):
        await store.set_token(db, me, tokens.unusable_hash())
    request.app.state.token_cache.forget_user(me)
    return Response(status_code=204)


@router.get("/users/me", response_model=Me, tags=["users"], responses={**AUTH, **BAD_TOKEN})
async def get_me(token: Token, request: Request, after: ReadAfter) -> Me:
    """The caller's own account, with its notification mail settings."""
    return Me(**await read(request, token, after, store.get_me))


@router.patch("/users/me", response_model=Me, tags=["users"], responses={**AUTH, **BODY, **LIMITED})
async def update_me(update: MeUpdate, token: Token, request: Request) -> Me:
    """Set where notification mail goes (`email`, null: nowhere) and which kinds are mailed (`email_kinds`); a
    field left out is left as it is."""
    async with write_session(request, token) as (db, me):
        row = await store.update_me(db, me, set_email="email" in update.model_fields_set, email=update.email,
                                    kinds=update.email_kinds)
    return Me(**row)


@router.get("/users/{user_id}", response_model=User, tags=["users"], responses={**AUTH, **NOT_FOUND, **BAD_TOKEN})
async def get_user(user_id: Id, token: Token, request: Request, after: ReadAfter) -> User:
    row = await read(request, token, after, lambda db, _: store.get_user(db, user_id))
    if row is None:
        raise ApiError(404, f"no user {user_id}")
    threshold = request.app.state.settings.celebrity_threshold
    return User(id=row["id"], handle=row["handle"], follower_count=row["follower_count"],
                following_count=row["following_count"], celebrity=row["follower_count"] >= threshold)


@router.put("/following/{user_id}", status_code=204, response_class=Response, tags=["following"],
            responses={**AUTH, **NOT_FOUND, **LIMITED, **invalid("user_id is the caller's own (self-follow)"),
                       409: {"description": "already following the most allowed (following-limit)"}})
async def follow(user_id: Id, token: Token, request: Request) -> Response:
    """The caller follows user_id. Idempotent: following again changes nothing."""
    with outbox_trace(request) as trace:
        async with write_session(request, token) as (db, me):
            if user_id == me:
                raise ApiError(422, "you cannot follow yourself", "self-follow")
            try:
                if await store.set_follow(db, me, user_id, follow=True, trace=trace) is None:
                    raise ApiError(404, f"no user {user_id}")
            except store.FollowLimit:
                raise ApiError(409, f"you follow {MAX_FOLLOWING} accounts, the most allowed: unfollow one first",
                               "following-limit") from None
    return Response(status_code=204)


@router.delete("/following/{user_id}", status_code=204, response_class=Response, tags=["following"],
               responses={**AUTH, **NOT_FOUND, **LIMITED})
async def unfollow(user_id: Id, token: Token, request: Request) -> Response:
    """The caller stops following user_id. Idempotent."""
    with outbox_trace(request) as trace:
        async with write_session(request, token) as (db, me):
            if user_id != me and await store.set_follow(db, me, user_id, follow=False, trace=trace) is None:
                raise ApiError(404, f"no user {user_id}")
    return Response(status_code=204)
