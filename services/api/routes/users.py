"""Sign-up, profiles, following."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from services.api import passwords, ratelimit, store, tokens
from services.api.deps import ReadAfter, Token, database, read, throttle, write_session, written
from services.api.models import (
    CreatedUser,
    EmailVerification,
    Me,
    MeUpdate,
    NewPassword,
    NewToken,
    NewUser,
    Unsubscribed,
    User,
)
from services.api.problems import ApiError
from services.api.ratelimit import Quota
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
from services.core import mailtokens
from services.core.feed import MAX_FOLLOWING

router = APIRouter(prefix="/v1", responses={**INVALID, **UNAVAILABLE})


@router.post("/users", status_code=201, response_model=CreatedUser, tags=["users"],
             responses={**BODY, **LIMITED, 409: {"description": "the handle is taken (handle-taken)"}})
async def create_user(new: NewUser, request: Request) -> CreatedUser:
    """Sign up. The token in the reply is the only copy: only its hash is stored. With a `password`, the account
    can also log in through OAuth (the Mastodon API, docs/mastodon.md)."""
    token = tokens.new_token()
    client = ratelimit.client_subject(request.client.host if request.client else None)
    async with database(request) as db:
        await throttle(request, db, request.app.state.api_settings.signup_limit, client)
        hashed = None if new.password is None else await passwords.hash_password(new.password)
        row = await store.create_user(db, new.handle, tokens.token_hash(token), hashed)
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
    request.app.state.token_changes.forget_user(me)
    return NewToken(token=new)


@router.delete("/users/me/token", status_code=204, response_class=Response, tags=["users"],
               responses={**AUTH, **LIMITED})
async def revoke_token(token: Token, request: Request) -> Response:
    """Revoke the caller's token, leaving the account without one: nothing can act as it any more (there is no
    other credential to get a new token with). To replace a leaked token, rotate it instead."""
    async with write_session(request, token) as (db, me):
        await store.set_token(db, me, tokens.unusable_hash())
    request.app.state.token_changes.forget_user(me)
    return Response(status_code=204)


@router.put("/users/me/password", status_code=204, response_class=Response, tags=["users"],
            responses={**AUTH, **BODY, **LIMITED})
async def set_password(new: NewPassword, token: Token, request: Request) -> Response:
    """Set the caller's password (8 to 256 characters), the one OAuth logins check (docs/mastodon.md); stored as an
    argon2id hash. The bearer token and OAuth tokens issued before keep working."""
    hashed = await passwords.hash_password(new.password)
    async with write_session(request, token) as (db, me):
        await store.set_password(db, me, hashed)
    return Response(status_code=204)


@router.get("/users/me", response_model=Me, tags=["users"], responses={**AUTH, **BAD_TOKEN})
async def get_me(token: Token, request: Request, after: ReadAfter = None) -> Me:
    """The caller's own account, with its notification mail settings."""
    return Me(**await read(request, token, after, store.get_me))


@router.patch("/users/me", response_model=Me, tags=["users"], responses={**AUTH, **BODY, **LIMITED})
async def update_me(update: MeUpdate, token: Token, request: Request) -> Me:
    """Set where notification mail goes (`email`, null: nowhere) and which kinds are mailed (`email_kinds`); a
    field left out is left as it is."""
    async with write_session(request, token) as (db, me):
        if update.email is not None:  # each new address is mailed a code: a bound on mail to strangers' boxes
            await throttle(request, db, VERIFICATION_MAILS, str(me))
        row = await store.update_me(db, me, set_email="email" in update.model_fields_set, email=update.email,
                                    kinds=update.email_kinds)
    return Me(**row)


VERIFICATION_MAILS = Quota("email-verification", 10, 3600)  # addresses set per user and hour (each is mailed)
_BAD_CODE: dict[int | str, dict[str, Any]] = {400: {
    "description": "malformed JSON, or not the code mailed to the caller's current address or expired "
                   "(invalid-verification-code)"}}


@router.post("/users/me/email/verify", response_model=Me, tags=["users"], responses={**AUTH, **BODY, **LIMITED,
                                                                                      **_BAD_CODE})
async def verify_email(verification: EmailVerification, token: Token, request: Request) -> Me:
    """Confirm the caller's address with the code mailed to it when it was set; notification mail goes there from
    now on. A new address needs its own code."""
    async with write_session(request, token) as (db, me):
        found = await store.mail_token_key(db, me)
        code = mailtokens.parse_verification(verification.code)
        email = found[0] if found is not None else None
        if found is None or email is None or code is None \
                or not mailtokens.verifies(found[1], code, me, email, time.time()):
            raise ApiError(400, "the code is not the one mailed to your current address, or it expired: set the "
                                "address again (PATCH /v1/users/me) for a new one", "invalid-verification-code")
        row = await store.verify_email(db, me, email)
    if row is None:  # the address changed meanwhile
        raise ApiError(400, "your address changed meanwhile: use the code mailed to the new one",
                       "invalid-verification-code")
    return Me(**row)


UnsubscribeToken = Annotated[str, Query(max_length=mailtokens.MAX_LENGTH,
                                        description="the token of the mail's List-Unsubscribe URL")]


@router.post("/unsubscribe", response_model=Unsubscribed, tags=["users"], responses={
    400: {"description": "not a token walfeed mailed to the user's current address (invalid-unsubscribe-token)"}})
async def unsubscribe(token: UnsubscribeToken, request: Request) -> Unsubscribed:
    """One-click unsubscribe (RFC 8058): the mail client POSTs `List-Unsubscribe=One-Click` to the URL of a
    notification mail's List-Unsubscribe header; no bearer token, the signed token is the authority. Mail of
    that kind to that address stops (`email_kinds` loses it). Any body is accepted and ignored."""
    parsed = mailtokens.parse_unsubscribe(token)
    async with database(request) as db:
        found = None if parsed is None else await store.mail_token_key(db, parsed.user)
        if parsed is None or found is None or found[0] is None \
                or not mailtokens.unsubscribes(found[1], parsed, found[0]):
            raise ApiError(400, "this unsubscribe link is not valid for the address it was mailed to (the address "
                                "may have changed since; no mail goes there then)", "invalid-unsubscribe-token")
        await store.unsubscribe(db, parsed.user, parsed.kind, found[0])
    return Unsubscribed(unsubscribed=parsed.kind)  # type: ignore[arg-type]


@router.get("/users/{user_id}", response_model=User, tags=["users"], responses={**AUTH, **NOT_FOUND, **BAD_TOKEN})
async def get_user(user_id: Id, token: Token, request: Request, after: ReadAfter = None) -> User:
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
