"""Request and response bodies (docs/api.md). Pydantic models document the OpenAPI schema."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from services.api import text

BIGINT_MAX = 2**63 - 1
HANDLE_PATTERN = r"^[a-z0-9_]{1,30}$"


class NewUser(BaseModel):
    model_config = ConfigDict(extra="forbid")
    handle: Annotated[str, Field(pattern=HANDLE_PATTERN, examples=["alice"])]


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
    created_at: str = Field(description="RFC 3339, UTC", examples=["2026-01-01T12:00:00.000000Z"])


class Page(BaseModel):
    items: list[Post]
    next_cursor: str | None


class Status(BaseModel):
    status: str


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _post_fields(row: dict[str, Any]) -> dict[str, Any]:
    """A posts row as the fields of Post: the one place both representations below come from."""
    return {"id": row["id"], "author_id": row["author_id"], "body": row["body"],
            "created_at": rfc3339(row["created_at"])}


def post_json(row: dict[str, Any]) -> bytes:
    """The Post representation of a row as JSON, without building and re-validating a model (the hot path)."""
    return orjson.dumps(_post_fields(row))


def post_from_row(row: dict[str, Any]) -> Post:
    return Post(**_post_fields(row))
