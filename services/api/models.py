"""Request and response bodies (docs/api.md). Pydantic models document the OpenAPI schema."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import orjson
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from services.api import passwords, text

BIGINT_MAX = 2**63 - 1
HANDLE_PATTERN = r"^[a-z0-9_]{1,30}$"


class NewUser(BaseModel):
    model_config = ConfigDict(extra="forbid")
    handle: Annotated[str, Field(pattern=HANDLE_PATTERN, examples=["alice"])]
    password: Annotated[str | None, Field(
        min_length=passwords.MIN_CHARS, max_length=passwords.MAX_CHARS,
        description="optional: the password of OAuth logins (the Mastodon API, docs/mastodon.md); stored as an "
                    "argon2id hash")] = None

    @field_validator("password")
    @classmethod
    def _settable(cls, value: str | None) -> str | None:
        return None if value is None else settable_password(value)


class NewPassword(BaseModel):
    model_config = ConfigDict(extra="forbid")
    password: Annotated[str, Field(min_length=passwords.MIN_CHARS, max_length=passwords.MAX_CHARS)]

    @field_validator("password")
    @classmethod
    def _settable(cls, value: str) -> str:
        return settable_password(value)


def settable_password(value: str) -> str:
    why = passwords.problem(value)
    if why is not None:
        raise ValueError(why)
    return value


class CreatedUser(BaseModel):
    id: int
    handle: str
    token: str = Field(description="bearer token; shown once, only its hash is stored")


class NewToken(BaseModel):
    token: str = Field(description="the caller's new bearer token; the old one no longer works")


class User(BaseModel):
    id: int
    handle: str
    follower_count: int
    following_count: int
    celebrity: bool


class NewPost(BaseModel):
    model_config = ConfigDict(extra="forbid")
    body: Annotated[str, Field(min_length=1, max_length=text.MAX_CHARS, examples=["hello"],
                              description="1..500 characters, stored NFC-normalised; see ADR 0034")]

    @field_validator("body")
    @classmethod
    def _storable(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("body must not contain NUL characters")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("body must be valid Unicode (no lone surrogates)") from None
        return text.normalize_body(value)


class Post(BaseModel):
    id: int
    author_id: int
    body: str
    created_at: str = Field(description="RFC 3339, UTC (microseconds when not zero)",
                            examples=["2026-01-01T12:00:00.123456Z"])


class Page(BaseModel):
    items: list[Post]
    next_cursor: str | None


class HomePage(Page):
    next_cursor: str | None = Field(description="the page of older posts; null when there are none")
    prev_cursor: str | None = Field(
        description="the page of newer posts, the ones just above this page's newest id (posts that arrive later "
                    "with a newer id show up there; docs/api.md: one whose fan-out ran after a newer post was shown "
                    "is on the first page, read again); null only on an empty page that was not itself asked for "
                    "newer posts")


class ReplicaStatus(BaseModel):
    status: str = Field(description="ok, unreachable (reads go to the primary) or not-a-standby")
    lag_bytes: Annotated[int | None, Field(description="WAL the replica has still to replay behind the primary")] = None


class Status(BaseModel):
    status: str
    replica: Annotated[ReplicaStatus | None, Field(description="only with WALFEED_DATABASE_READ_URL set")] = None


def utc(moment: datetime) -> datetime:
    """The api's connections run in UTC (services/api/db.py), so this is the moment itself but for a foreign one."""
    return moment if moment.tzinfo is UTC else moment.astimezone(UTC)


def rfc3339(moment: datetime) -> str:
    """RFC 3339 in UTC with a Z, microseconds when there are any: as orjson writes a UTC datetime (OPT_UTC_Z), which
    is how the listings' posts are written (page_json), in C (1.5-2 us a timestamp in Python, most of a page's
    serialisation: docs/adr/0096)."""
    return utc(moment).isoformat().replace("+00:00", "Z")


def _post_fields(row: dict[str, Any]) -> dict[str, Any]:
    """A posts row as the fields of Post: the one place both representations below come from."""
    return {"id": row["id"], "author_id": row["author_id"], "body": row["body"], "created_at": utc(row["created_at"])}


def post_json(row: dict[str, Any]) -> bytes:
    """The Post representation of a row as JSON, without building and re-validating a model (the hot path)."""
    return orjson.dumps(_post_fields(row), option=orjson.OPT_UTC_Z)


def page_json(rows: list[dict[str, Any]], next_cursor: str | None, **more_cursors: str | None) -> bytes:
    """A Page (or HomePage, with its prev_cursor) of posts rows as JSON, built directly as post_json is."""
    return orjson.dumps({"items": [_post_fields(r) for r in rows], "next_cursor": next_cursor, **more_cursors},
                        option=orjson.OPT_UTC_Z)




# Notifications (docs/notifications.md).

Kind = Literal["follow", "mention"]
# An address as mail servers take it, checked loosely (the delivery worker's SMTP server has the last word): one
# @, no space or ASCII control character (no header injection), a dot in the domain. RFC 5321 caps a path at 256
# octets, so 254 characters. ASCII ranges only: the OpenAPI document's regex dialect and Python's agree on them.
EMAIL_PATTERN = r"^[^@\x00-\x20\x7f]{1,64}@[^@\x00-\x20\x7f]+\.[^@\x00-\x20\x7f]+$"


def _distinct_kinds(kinds: list[Kind]) -> list[Kind]:
    return list(dict.fromkeys(kinds))


class Notification(BaseModel):
    id: int
    kind: Kind
    actor_id: int = Field(description="who followed, or who mentioned")
    post_id: int | None = Field(description="mention: the post; follow: null")
    created_at: str = Field(description="RFC 3339, UTC")
    read: bool = Field(description="at or below the caller's read marker")


class NotificationPage(BaseModel):
    items: list[Notification]
    next_cursor: str | None
    unread_count: int = Field(description="notifications above the read marker, counted up to 10,000")


def _json_number(value: object) -> object:
    """A JSON number only: pydantic would take "12" for 12 (JSON Schema's integer takes 12.0, and so do we)."""
    if isinstance(value, str | bool):
        raise ValueError("must be a JSON integer")
    return value


class MarkRead(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # No maximum: a larger number than any id means "everything so far" (JSON numbers past 2**53 also lose their
    # last digits in many clients, so a bound at the bigint maximum would not be one they can rely on).
    up_to: Annotated[int, Field(ge=1, description="every notification with an id up to this is read"),
                     BeforeValidator(_json_number), AfterValidator(lambda value: min(value, BIGINT_MAX))]


class Unread(BaseModel):
    unread_count: int


Email = Annotated[str, Field(max_length=254, pattern=EMAIL_PATTERN, examples=["alice@example.com"])]
# No maxItems: repeats are allowed and dropped (the request body's size bounds the list).
Kinds = Annotated[list[Kind], AfterValidator(_distinct_kinds)]


class MeUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    email: Email | None = Field(None, description="where notification mail goes; null: no mail")
    email_kinds: Kinds | None = Field(None, description="the notification kinds mailed; null or absent: unchanged")


class Me(BaseModel):
    id: int
    handle: str
    email: str | None
    email_kinds: list[Kind]
    email_verified: bool = Field(description="the address is confirmed (POST /v1/users/me/email/verify): "
                                             "notification mail goes to a verified address only")


class EmailVerification(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: Annotated[str, Field(min_length=1, max_length=200, description="the code of the verification mail")]


class Unsubscribed(BaseModel):
    unsubscribed: Kind = Field(description="the notification kind no longer mailed to that address")


# Webhooks (docs/notifications.md).

class NewWebhook(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: Annotated[str, Field(min_length=1, max_length=2048, examples=["https://example.com/walfeed"],
                              description="https (http only where the server allows it); public addresses only")]
    events: Annotated[list[Kind], Field(min_length=1, description="the notification kinds delivered (repeats dropped)"),
                      AfterValidator(_distinct_kinds)]


class Webhook(BaseModel):
    id: int
    url: str
    events: list[Kind]
    enabled: bool
    disabled_reason: str | None
    created_at: str = Field(description="RFC 3339, UTC")
    previous_secret_expires_at: str | None = Field(
        description="during a rotation: until when the previous secret signs too")


class WebhookCreated(Webhook):
    secret: str = Field(description="whsec_ signing secret (Standard Webhooks); shown only here")


class WebhookSecret(BaseModel):
    id: int
    secret: str = Field(description="whsec_ signing secret (Standard Webhooks); shown only here")
    previous_secret_expires_at: str | None = Field(
        description="after a rotation: until when the previous secret signs too")


class WebhookList(BaseModel):
    items: list[Webhook]


class Delivery(BaseModel):
    id: int = Field(description="also the webhook-id header of every attempt")
    notification_id: int | None = Field(description="null for a ping")
    status: Literal["PENDING", "RETRYING", "DELIVERED", "DEAD", "WITHDRAWN"]
    attempts: int
    last_status_code: int | None
    last_error: str | None
    next_attempt_at: str | None = Field(description="RFC 3339, UTC; while RETRYING")
    created_at: str
    updated_at: str


class DeliveryPage(BaseModel):
    items: list[Delivery]
    next_cursor: str | None


class DeliveryCreated(BaseModel):
    delivery_id: int


def notification_from_row(row: dict[str, Any]) -> Notification:
    return Notification(id=row["id"], kind=row["kind"], actor_id=row["actor_id"], post_id=row["post_id"],
                        created_at=rfc3339(row["created_at"]), read=row["read"])


def _optional_time(moment: datetime | None) -> str | None:
    return None if moment is None else rfc3339(moment)


def webhook_fields(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "url": row["url"], "events": row["events"], "enabled": row["disabled_at"] is None,
            "disabled_reason": row["disabled_reason"], "created_at": rfc3339(row["created_at"]),
            "previous_secret_expires_at": _optional_time(row["previous_until"])}


def delivery_from_row(row: dict[str, Any]) -> Delivery:
    return Delivery(id=row["id"], notification_id=row["notification_id"], status=row["status"],
                    attempts=row["attempts"], last_status_code=row["last_status_code"], last_error=row["last_error"],
                    next_attempt_at=_optional_time(row["next_attempt_at"]), created_at=rfc3339(row["created_at"]),
                    updated_at=rfc3339(row["updated_at"]))


# Search (docs/api.md "Search", docs/search.md).

class SearchHit(Post):
    score: float = Field(description="how well the post matches, higher is better; comparable within one answer only "
                                     "(text: ts_rank_cd; semantic: cosine similarity; hybrid: reciprocal rank fusion)")


class SearchPage(BaseModel):
    items: list[SearchHit]
    next_cursor: str | None = Field(description="the next page of this same query; null on the last page")
    mode: Literal["hybrid", "semantic", "text"] = Field(description="the mode that answered")
    degraded: Literal["embedder-off", "embedder-unavailable", "index-loading", "model-incomplete"] | None = Field(
        description="why a semantic or hybrid search answered from text alone; null when it answered as asked")


def search_page_json(hits: list[tuple[dict[str, Any], float]], next_cursor: str | None, mode: str,
                     degraded: str | None) -> bytes:
    """A SearchPage of (posts row, score) as JSON, built directly as page_json is."""
    return orjson.dumps({"items": [{**_post_fields(row), "score": score} for row, score in hits],
                         "next_cursor": next_cursor, "mode": mode, "degraded": degraded})
