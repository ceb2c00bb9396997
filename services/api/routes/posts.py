"""Posts: write (idempotent with Idempotency-Key), read, delete; one author's posts."""

from __future__ import annotations

import hashlib
import hmac
from typing import Annotated

import orjson
from fastapi import APIRouter, Header, Request, Response

from services.api import cursor as cursors
from services.api import paging, store
from services.api.deps import ReadAfter, Token, admit, read, session, write_session, written
from services.api.fastroute import FastRoute
from services.api.models import NewPost, Page, Post, page_json, post_json
from services.api.problems import ApiError
from services.api.routes import (
    AUTH,
    BAD_CURSOR_OR_TOKEN,
    BAD_TOKEN,
    BODY,
    INVALID,
    LIMITED,
    NOT_FOUND,
    UNAVAILABLE,
    CursorParam,
    Id,
    Limit,
    invalid,
    outbox_trace,
)

router = APIRouter(prefix="/v1", responses={**AUTH, **INVALID, **UNAVAILABLE}, route_class=FastRoute)

IdempotencyKey = Annotated[str | None, Header(
    alias="Idempotency-Key", min_length=1, max_length=255, pattern=r"^[!-~]+$",
    description="retrying with the same key returns the original post and creates nothing")]


def request_hash(new: NewPost) -> bytes:
    """Hash of the request's meaning (the validated body), so a re-serialized retry still matches."""
    return hashlib.sha256(orjson.dumps(new.model_dump(), option=orjson.OPT_SORT_KEYS)).digest()


@router.post("/posts", status_code=201, response_model=Post, tags=["posts"], responses={
    **BODY, **LIMITED, **invalid("the Idempotency-Key was used with another body (idempotency-key-reused)"),
    201: {"description": "the post; a replay of an Idempotency-Key answers it again", "headers": {
        "Idempotent-Replayed": {"schema": {"type": "string", "enum": ["true"]},
                                "description": "present when this is the post of an earlier request"}}}})
async def create_post(new: NewPost, token: Token, request: Request,
                      idempotency_key: IdempotencyKey = None) -> Response:
    """Publish a post as the caller, with its post.created event in the same transaction. No fan-out here."""
    digest = request_hash(new) if idempotency_key is not None else None
    quota = request.app.state.api_settings.write_limit
    with outbox_trace(request) as trace:
        async with session(request, token) as (db, me):
            if quota.enabled:  # counted and written in one statement (sql.CREATE_POST_COUNTED)
                hit, post, created = await store.create_counted_post(
                    db, quota.key(str(me)), quota.window, quota.limit, me, new.body, idempotency_key, digest, trace)
                admit(request, quota, hit)  # 429 when refused (nothing was written then)
                assert post is not None
                row = post
            else:
                row, created = await store.create_post(db, me, new.body, idempotency_key, digest, trace)
            await written(request, db, me)
    if not created and (digest is None or not hmac.compare_digest(bytes(row["request_hash"] or b""), digest)):
        raise ApiError(422, "this Idempotency-Key was already used with a different request body",
                       "idempotency-key-reused")
    # The Post model documents the reply; the bytes are built directly (models.post_json, same fields).
    return json_response(post_json(row), 201, None if created else {"Idempotent-Replayed": "true"})


@router.get("/posts/{post_id}", response_model=Post, tags=["posts"], responses={**NOT_FOUND, **BAD_TOKEN})
async def get_post(post_id: Id, token: Token, request: Request, after: ReadAfter = None) -> Response:
    row = await read(request, token, after, lambda db, _: store.get_post(db, post_id))
    if row is None:
        raise ApiError(404, f"no post {post_id}")
    return json_response(post_json(row))


@router.delete("/posts/{post_id}", status_code=204, response_class=Response, tags=["posts"],
               responses={**NOT_FOUND, **LIMITED})
async def delete_post(post_id: Id, token: Token, request: Request) -> Response:
    """Delete one of the caller's posts. A post that is deleted already, or not the caller's, is a 404 as for
    GET: the answer does not tell whether someone else's post exists."""
    with outbox_trace(request) as trace:
        async with write_session(request, token) as (db, me):
            if await store.delete_post(db, post_id, me, trace) is None:
                raise ApiError(404, f"no post {post_id} of yours")
    return Response(status_code=204)


@router.get("/users/{user_id}/posts", response_model=Page, tags=["posts"],
            responses={**NOT_FOUND, **BAD_CURSOR_OR_TOKEN})
async def user_posts(user_id: Id, token: Token, request: Request, after: ReadAfter = None, limit: Limit = 20,
                     cursor: CursorParam = None) -> Response:
    """One author's posts, newest first."""
    kind = f"user:{user_id}"
    before = decode_cursor(kind, cursor)

    async def posts_of_user(db: store.Conn, _: int) -> list[store.Row] | None:
        """The page, or None when the user does not exist."""
        rows = await store.author_posts(db, user_id, before or cursors.MAX_ID, limit + 1)
        if not rows and before is None and not await store.user_exists(db, user_id):
            return None
        return rows

    rows = await read(request, token, after, posts_of_user)
    if rows is None:
        raise ApiError(404, f"no user {user_id}")
    return page(kind, rows, limit)


def decode_cursor(kind: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return cursors.decode(kind, value)
    except cursors.InvalidCursor as exc:
        raise ApiError(400, f"{exc}: pass the next_cursor of a previous page unchanged", "invalid-cursor") from None


def page(kind: str, rows: list[store.Row], limit: int) -> Response:
    """The Page of the first `limit` rows (one more tells a next page exists), as bytes: the route's response_model
    documents it, and nothing validates again what the database returned (models.page_json, same fields)."""
    items, more = paging.cut(rows, limit)
    return json_response(page_json(items, cursors.encode(kind, items[-1]["id"]) if more else None))


def json_response(body: bytes, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(body, status_code=status, media_type="application/json", headers=headers)
