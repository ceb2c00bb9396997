"""The parameters of a Mastodon request, parsed totally (docs/mastodon.md): the query string, and a body that is
a form (`application/x-www-form-urlencoded`, as Mastodon.py sends) or JSON (as toot and masto.js send). Rails
merges them; so does this. `key[]` collects a list; unknown keys are ignored; booleans are 0/1/true/false; ids
are strings of digits. Pure except `gather`, which reads the request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl

import orjson
from fastapi import Request

from services.api.cursor import MAX_ID
from services.api.mastodon.errors import MastodonError

MAX_KEYS: Final = 200
MAX_LIST: Final = 100
_TRUE: Final = frozenset({"1", "true", "t", "on", "yes"})
_FALSE: Final = frozenset({"0", "false", "f", "off", "no", ""})


@dataclass(frozen=True, slots=True)
class Params:
    values: Mapping[str, Any]  # str, list of str, or (from JSON) whatever JSON held

    def text(self, name: str, max_chars: int = 10_000) -> str | None:
        """A string parameter (a JSON number is taken as its text); None when absent or null."""
        value = self.values.get(name)
        if value is None:
            return None
        if isinstance(value, (bool, list, dict)):
            raise MastodonError(422, f"Validation failed: {name} must be a string")
        text = str(value)
        if len(text) > max_chars:
            raise MastodonError(422, f"Validation failed: {name} is too long (at most {max_chars} characters)")
        return text

    def boolean(self, name: str, default: bool = False) -> bool:
        value = self.values.get(name)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise MastodonError(422, f"Validation failed: {name} must be a boolean (true, false, 1 or 0)")

    def strings(self, name: str) -> list[str]:
        """`name[]` (or `name` as a list in JSON, or one value): a list of strings."""
        value = self.values.get(f"{name}[]", self.values.get(name))
        if value is None:
            return []
        items = value if isinstance(value, list) else [value]
        if len(items) > MAX_LIST:
            raise MastodonError(422, f"Validation failed: at most {MAX_LIST} {name}")
        return [str(item)[:100] for item in items if isinstance(item, (str, int)) and not isinstance(item, bool)]

    def limit(self, default: int = 20, maximum: int = 40) -> int:
        """`limit`, clamped into 1..maximum as Mastodon does (not refused); junk is the default."""
        value = self.values.get("limit")
        try:
            number = int(str(value)) if value is not None and not isinstance(value, bool) else default
        except ValueError:
            number = default
        return max(1, min(maximum, number))

    def position(self, name: str) -> int | None:
        """A paging id (max_id, since_id, min_id): digits; anything else is ignored, as if absent (Mastodon
        compares it as a string and finds nothing; a junk cursor must not be an error page)."""
        value = self.values.get(name)
        if value is None or isinstance(value, bool):
            return None
        text = str(value).strip()
        if not text.isascii() or not text.isdigit() or len(text) > 19 or int(text) > MAX_ID:
            return None
        return int(text)


def record_id(value: str) -> int:
    """A path id: digits of a positive bigint, else 404 (a junk id names no record)."""
    if not value.isascii() or not value.isdigit() or len(value) > 19 or not 0 < int(value) <= MAX_ID:
        raise MastodonError(404, "Record not found")
    return int(value)


def parse_form(body: bytes) -> dict[str, Any]:
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False,
                          max_num_fields=MAX_KEYS)
    except (UnicodeDecodeError, ValueError):
        raise MastodonError(400, "the form body is not valid UTF-8 url-encoded text") from None
    return collect(pairs)


def collect(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Key-value pairs as a mapping: `key[]` collects a list; otherwise the last value wins."""
    values: dict[str, Any] = {}
    for key, value in pairs:
        if key.endswith("[]"):
            values.setdefault(key, []).append(value)
        else:
            values[key] = value
    return values


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise MastodonError(400, "the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise MastodonError(422, "the JSON body must be an object")
    if len(data) > MAX_KEYS:
        raise MastodonError(422, f"at most {MAX_KEYS} parameters")
    return data


def parse_body(content_type: str, body: bytes) -> dict[str, Any]:
    if not body.strip():
        return {}
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "application/json" or media.endswith("+json"):
        return parse_json(body)
    if media in ("application/x-www-form-urlencoded", ""):
        return parse_form(body)
    if media == "multipart/form-data":
        raise MastodonError(415, "multipart bodies are not supported: send a form (url-encoded) or JSON")
    raise MastodonError(415, f"unsupported content type {media[:80]!r}: send a form (url-encoded) or JSON")


async def gather(request: Request) -> Params:
    """The query's parameters, then the body's over them."""
    try:
        query = collect(parse_qsl(request.url.query, keep_blank_values=True, max_num_fields=MAX_KEYS))
    except ValueError:
        raise MastodonError(400, "too many query parameters") from None
    if request.method in ("GET", "HEAD"):
        return Params(query)
    body = parse_body(request.headers.get("content-type", ""), await request.body())
    return Params({**query, **body})
