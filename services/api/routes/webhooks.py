"""The caller's webhooks: register (URL checked against SSRF), list, delete, rotate the secret, ping, deliveries
and their retry, re-enable (docs/notifications.md). Another user's webhook is a 404, as one that does not exist.
Secrets are returned once and never logged."""

from __future__ import annotations

import functools
import logging
from typing import Any

from fastapi import APIRouter, Request, Response

from services.api import cursor as cursors
from services.api import lookups, paging, store
from services.api.deps import Token, database, session, write_session
from services.api.models import (
    DeliveryCreated,
    DeliveryPage,
    NewWebhook,
    Webhook,
    WebhookCreated,
    WebhookList,
    WebhookSecret,
    delivery_from_row,
    rfc3339,
    webhook_fields,
)
from services.api.problems import ApiError
from services.api.routes import (
    AUTH,
    BAD_CURSOR,
    BODY,
    INVALID,
    LIMITED,
    NOT_FOUND,
    UNAVAILABLE,
    CursorParam,
    Id,
    Limit,
    invalid,
)
from services.api.routes.posts import decode_cursor
from services.core import signing, ssrf

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1", responses={**AUTH, **INVALID, **UNAVAILABLE}, tags=["webhooks"])

DISABLED: dict[int | str, dict[str, Any]] = {
    409: {"description": "the webhook is disabled: enable it first (webhook-disabled)"}}


def _not_found(webhook_id: int) -> ApiError:
    return ApiError(404, f"no webhook {webhook_id} of yours")


@router.post("/webhooks", status_code=201, response_model=WebhookCreated, responses={
    **BODY, **LIMITED, **invalid("the URL is refused: not https, or not a public address (webhook-url-refused)"),
    409: {"description": f"the caller has {store.MAX_WEBHOOKS} webhooks already (webhook-limit)"}})
async def create_webhook(new: NewWebhook, token: Token, request: Request) -> WebhookCreated:
    """Register a webhook for the given notification kinds. The reply holds its signing secret, the only copy
    shown. The URL must be https and every address its host resolves to public (the delivery worker checks
    again at each attempt: DNS answers change)."""
    async with write_session(request, token) as (_, me):
        pass  # authenticated and within the write limit before any DNS lookup is made for the caller
    policy: ssrf.Policy = request.app.state.api_settings.webhook_policy
    try:  # getaddrinfo blocks: on the lookups' own threads, off the event loop and its default executor
        await lookups.WEBHOOK_LOOKUPS.run(functools.partial(ssrf.checked, new.url, policy))
    except ssrf.UrlRefused as exc:
        log.info("webhook URL refused", extra={"user_id": me, "reason": str(exc), "detail": exc.detail})
        raise ApiError(422, f"webhook URL refused: {exc}", "webhook-url-refused") from None
    except lookups.LookupTimeout:
        raise ApiError(422, "webhook URL refused: its host did not resolve in time; check the name or try again",
                       "webhook-url-refused") from None
    except lookups.LookupsBusy:
        raise ApiError(503, "too many webhook URLs are being checked at once: try again shortly",
                       "lookups-busy", {"Retry-After": "1"}) from None
    secret = signing.generate_secret()
    async with database(request) as db:  # no connection held while resolving
        try:
            row = await store.create_webhook(db, me, new.url, new.events, secret)
        except store.WebhookLimit:
            raise ApiError(409, f"you have {store.MAX_WEBHOOKS} webhooks, the most allowed: delete one first",
                           "webhook-limit") from None
    return WebhookCreated(**webhook_fields(row), secret=secret)


@router.get("/webhooks", response_model=WebhookList)
async def list_webhooks(token: Token, request: Request) -> WebhookList:
    """The caller's webhooks (without their secrets)."""
    async with session(request, token) as (db, me):
        rows = await store.webhooks(db, me)
    return WebhookList(items=[Webhook(**webhook_fields(r)) for r in rows])


@router.get("/webhooks/{webhook_id}", response_model=Webhook, responses=NOT_FOUND)
async def get_webhook(webhook_id: Id, token: Token, request: Request) -> Webhook:
    async with session(request, token) as (db, me):
        rows = await store.webhooks(db, me, webhook_id)
    if not rows:
        raise _not_found(webhook_id)
    return Webhook(**webhook_fields(rows[0]))


@router.delete("/webhooks/{webhook_id}", status_code=204, response_class=Response,
               responses={**NOT_FOUND, **LIMITED})
async def delete_webhook(webhook_id: Id, token: Token, request: Request) -> Response:
    """Delete the webhook and the history of its deliveries; deliveries not made yet are not made."""
    async with write_session(request, token) as (db, me):
        if not await store.delete_webhook(db, me, webhook_id):
            raise _not_found(webhook_id)
    return Response(status_code=204)


@router.post("/webhooks/{webhook_id}/rotate-secret", response_model=WebhookSecret,
             responses={**NOT_FOUND, **LIMITED})
async def rotate_secret(webhook_id: Id, token: Token, request: Request) -> WebhookSecret:
    """A new signing secret (shown only here). Until `previous_secret_expires_at` (WALFEED_WEBHOOK_SECRET_OVERLAP
    from now) every delivery carries a signature by each secret, so the receiver can switch at any time."""
    secret = signing.generate_secret()
    overlap: int = request.app.state.api_settings.secret_overlap
    async with write_session(request, token) as (db, me):
        row = await store.rotate_secret(db, me, webhook_id, secret, overlap)
    if row is None:
        raise _not_found(webhook_id)
    return WebhookSecret(id=row["id"], secret=secret,
                         previous_secret_expires_at=rfc3339(row["previous_secret_until"]) if overlap else None)


@router.post("/webhooks/{webhook_id}/enable", response_model=Webhook, responses={**NOT_FOUND, **LIMITED})
async def enable_webhook(webhook_id: Id, token: Token, request: Request) -> Webhook:
    """Enable a webhook the delivery worker disabled (410 Gone, or failing too long); idempotent."""
    async with write_session(request, token) as (db, me):
        if not await store.enable_webhook(db, me, webhook_id):
            raise _not_found(webhook_id)
        rows = await store.webhooks(db, me, webhook_id)
    return Webhook(**webhook_fields(rows[0]))


@router.post("/webhooks/{webhook_id}/ping", status_code=202, response_model=DeliveryCreated,
             responses={**NOT_FOUND, **LIMITED, **DISABLED})
async def ping(webhook_id: Id, token: Token, request: Request) -> DeliveryCreated:
    """A test delivery without notification, sent and signed like any other; follow it in the deliveries list."""
    async with write_session(request, token) as (db, me):
        delivery = await store.ping(db, me, webhook_id)
        if delivery is None:
            await _exists_or_404(db, me, webhook_id)
            raise ApiError(409, f"webhook {webhook_id} is disabled: enable it first", "webhook-disabled")
    return DeliveryCreated(delivery_id=delivery)


async def _exists_or_404(db: store.Conn, me: int, webhook_id: int) -> None:
    if not await store.webhooks(db, me, webhook_id):
        raise _not_found(webhook_id)


@router.get("/webhooks/{webhook_id}/deliveries", response_model=DeliveryPage,
            responses={**NOT_FOUND, **BAD_CURSOR})
async def deliveries(webhook_id: Id, token: Token, request: Request, limit: Limit = 20,
                     cursor: CursorParam = None) -> DeliveryPage:
    """The webhook's deliveries, newest first: status, attempts, last answer, next attempt."""
    kind = f"deliveries:{webhook_id}"
    before = decode_cursor(kind, cursor)
    async with session(request, token) as (db, me):
        await _exists_or_404(db, me, webhook_id)
        rows = await store.webhook_deliveries(db, webhook_id, before or cursors.MAX_ID, limit + 1)
    items, more = paging.cut(rows, limit)
    return DeliveryPage(items=[delivery_from_row(r) for r in items],
                        next_cursor=cursors.encode(kind, items[-1]["id"]) if more else None)


@router.post("/webhooks/{webhook_id}/deliveries/{delivery_id}/retry", status_code=202,
             response_model=DeliveryCreated, responses={**NOT_FOUND, **LIMITED, 409: {
                 "description": "the webhook is disabled (webhook-disabled), or the delivery is still under way or "
                                "withdrawn (delivery-not-retriable)"}})
async def retry_delivery(webhook_id: Id, delivery_id: Id, token: Token, request: Request) -> DeliveryCreated:
    """Deliver again a delivery that is over (DEAD, or DELIVERED to send it once more): PENDING, attempts from
    zero, with the same delivery id (the receiver's `webhook-id`)."""
    async with write_session(request, token) as (db, me):
        hooks = await store.webhooks(db, me, webhook_id)
        if not hooks:
            raise _not_found(webhook_id)
        if hooks[0]["disabled_at"] is not None:
            raise ApiError(409, f"webhook {webhook_id} is disabled: enable it first", "webhook-disabled")
        retried, status = await store.retry_delivery(db, me, webhook_id, delivery_id)
    if status is None:
        raise ApiError(404, f"no delivery {delivery_id} of webhook {webhook_id}")
    if not retried:
        raise ApiError(409, f"delivery {delivery_id} is {status}: only DEAD or DELIVERED ones are retried",
                       "delivery-not-retriable")
    return DeliveryCreated(delivery_id=delivery_id)
