"""Mastodon's entities (docs.joinmastodon.org/entities) from walfeed's rows, as pure functions: Account,
Status, Relationship, Notification, Application, Token, Instance. Ids are strings; timestamps are RFC 3339 with
milliseconds, as Mastodon writes them. A Status never has a `scheduled_at` key (toot takes such an object for a
scheduled post). What walfeed does not have is there with Mastodon's empty value (no media, no tags, no emojis,
no counts of favourites), so clients that read those keys find them."""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import orjson

VERSION: Final = "4.2.0"  # the Mastodon API version whose subset is served (docs/mastodon.md)
WALFEED_VERSION: Final = "0.1"
MAX_CHARACTERS: Final = 500  # services/api/text.py MAX_CHARS


@dataclass(frozen=True, slots=True)
class Site:
    """Where this server answers: `https://host` (links, uris) and `host` (the instance's domain)."""

    base: str
    domain: str


def timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def content_html(body: str) -> str:
    """A post's text as the escaped HTML paragraphs of Mastodon's `content`: blank lines part paragraphs, single
    newlines become <br />."""
    paragraphs = [p for p in body.replace("\r\n", "\n").split("\n\n") if p.strip()] or [body]
    return "".join("<p>" + html.escape(p, quote=True).replace("\n", "<br />") + "</p>" for p in paragraphs)


def account(row: dict[str, Any], site: Site, *, source: bool = False) -> dict[str, Any]:
    """An Account from a users row (id, handle, follower_count, following_count, created_at, statuses_count)."""
    handle = row["handle"]
    profile = f"{site.base}/@{handle}"
    missing = f"{site.base}/avatars/original/missing.png"
    entity: dict[str, Any] = {
        "id": str(row["id"]), "username": handle, "acct": handle, "display_name": handle,
        "locked": False, "bot": False, "discoverable": True, "group": False, "noindex": False,
        "created_at": timestamp(row["created_at"]), "note": "", "url": profile, "uri": f"{site.base}/users/{handle}",
        "avatar": missing, "avatar_static": missing, "header": f"{site.base}/headers/original/missing.png",
        "header_static": f"{site.base}/headers/original/missing.png",
        "followers_count": int(row["follower_count"]), "following_count": int(row["following_count"]),
        "statuses_count": int(row.get("statuses_count") or 0), "last_status_at": None,
        "emojis": [], "fields": [],
    }
    if source:
        entity["source"] = {"privacy": "public", "sensitive": False, "language": None, "note": "", "fields": [],
                            "follow_requests_count": 0}
    return entity


def status(row: dict[str, Any], author: dict[str, Any], site: Site, *, text: bool = False) -> dict[str, Any]:
    """A Status from a posts row (id, author_id, body, created_at) and its author's Account entity."""
    handle = author["username"]
    entity: dict[str, Any] = {
        "id": str(row["id"]), "created_at": timestamp(row["created_at"]),
        "in_reply_to_id": None, "in_reply_to_account_id": None, "sensitive": False, "spoiler_text": "",
        "visibility": "public", "language": None,
        "uri": f"{site.base}/users/{handle}/statuses/{row['id']}", "url": f"{site.base}/@{handle}/{row['id']}",
        "replies_count": 0, "reblogs_count": 0, "favourites_count": 0, "edited_at": None,
        "favourited": False, "reblogged": False, "muted": False, "bookmarked": False, "pinned": False,
        "content": content_html(row["body"]), "filtered": [], "reblog": None, "application": None,
        "account": author, "media_attachments": [], "mentions": [], "tags": [], "emojis": [], "card": None,
        "poll": None,
    }
    if text:  # DELETE answers the source text (for "delete and redraft")
        entity["text"] = row["body"]
    return entity


def status_head(row: dict[str, Any], handle: str, site: Site) -> bytes:
    """A Status as JSON without its account and closing brace, ending in `,"account":`: the part of a post that
    never changes, to which its author's Account (whose counts do) and `}` are appended (views.status_json)."""
    entity = status(row, {"username": handle}, site)
    del entity["account"]
    return orjson.dumps(entity)[:-1] + b',"account":'


def relationship(account_id: int, *, following: bool, followed_by: bool) -> dict[str, Any]:
    return {"id": str(account_id), "following": following, "showing_reblogs": following, "notifying": False,
            "languages": None, "followed_by": followed_by, "blocking": False, "blocked_by": False, "muting": False,
            "muting_notifications": False, "requested": False, "requested_by": False, "domain_blocking": False,
            "endorsed": False, "note": ""}


def notification(row: dict[str, Any], actor: dict[str, Any], post: dict[str, Any] | None) -> dict[str, Any]:
    """A Notification from a notifications row (id, kind, created_at), its actor's Account and, for a mention,
    the Status."""
    return {"id": str(row["id"]), "type": row["kind"], "created_at": timestamp(row["created_at"]),
            "group_key": f"ungrouped-{row['id']}", "account": actor, "status": post}


def application(row: dict[str, Any], secret: str | None = None) -> dict[str, Any]:
    """An Application (CredentialApplication when the secret is given: only at its creation)."""
    uris = list(row["redirect_uris"])
    entity: dict[str, Any] = {"id": str(row["id"]), "name": row["name"], "website": row["website"],
                              "scopes": list(row["scopes"]), "redirect_uri": "\n".join(uris),
                              "redirect_uris": uris, "vapid_key": "", "client_id": row["client_id"]}
    if secret is not None:
        entity |= {"client_secret": secret, "client_secret_expires_at": 0}
    return entity


def token(access_token: str, scope: str, created_at: datetime) -> dict[str, Any]:
    return {"access_token": access_token, "token_type": "Bearer", "scope": scope,
            "created_at": int(created_at.timestamp())}


def instance(site: Site, streaming: str, users: int, statuses: int) -> dict[str, Any]:
    """The v1 Instance. `version` starts with X.Y.Z, which Mastodon.py parses to decide what it may call."""
    return {
        "uri": site.domain, "title": "walfeed", "short_description": "A walfeed news feed",
        "description": "A walfeed news feed, speaking the part of Mastodon's client API a home timeline needs.",
        "email": "", "version": f"{VERSION} (compatible; walfeed {WALFEED_VERSION})",
        "urls": {"streaming_api": streaming}, "stats": {"user_count": users, "status_count": statuses,
                                                        "domain_count": 0},
        "thumbnail": None, "languages": ["en"], "registrations": False, "approval_required": False,
        "invites_enabled": False,
        "configuration": {
            "accounts": {"max_featured_tags": 0},
            "statuses": {"max_characters": MAX_CHARACTERS, "max_media_attachments": 0,
                         "characters_reserved_per_url": 23},
            "media_attachments": {"supported_mime_types": [], "image_size_limit": 0, "image_matrix_limit": 0,
                                  "video_size_limit": 0, "video_frame_rate_limit": 0, "video_matrix_limit": 0},
            "polls": {"max_options": 0, "max_characters_per_option": 0, "min_expiration": 0,
                      "max_expiration": 0},
        },
        "contact_account": None, "rules": [],
    }
