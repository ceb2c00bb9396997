"""OAuth 2 decisions for Mastodon clients, without I/O (docs/mastodon.md, docs/adr/0141): scopes, redirect URIs,
PKCE, and the secrets handed out (client secrets, codes and access tokens: 256 random bits each, kept as sha256
hashes like the api's bearer tokens, services/api/tokens.py).

Scopes are Mastodon's: `read`, `write`, `follow`, `push` and the granular `read:<x>` / `write:<x>`. `read` covers
every `read:<x>`, `write` every `write:<x>`; `follow` covers `read:follows` and `write:follows` (Mastodon's legacy
meaning). `push` may be asked for and is granted, and nothing here needs it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from typing import Final

from services.api import tokens

OOB: Final = "urn:ietf:wg:oauth:2.0:oob"  # no redirect: the authorize page shows the code
TOP: Final = frozenset({"read", "write", "follow", "push"})
ALL: Final = TOP  # what an api bearer token (POST /v1/users) may do on the Mastodon routes: everything
_GRANULAR: Final = re.compile(r"^(read|write|admin:read|admin:write):[a-z_]{1,40}$")
MAX_SCOPES: Final = 40
MAX_REDIRECT_URIS: Final = 10
MAX_URI_CHARS: Final = 2000
CODE_SECONDS: Final = 600  # an authorization code is exchanged within 10 minutes, once
_VERIFIER: Final = re.compile(r"^[A-Za-z0-9\-._~]{43,128}$")  # RFC 7636 4.1
_CHALLENGE: Final = re.compile(r"^[A-Za-z0-9\-._~]{43,128}$")


class OAuthError(ValueError):
    """An OAuth error (RFC 6749 5.2): `error` is the code, the message its description."""

    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status


def parse_scopes(text: str | None, default: str = "read") -> frozenset[str]:
    """The scopes of a space- (or `+`-) separated list; an empty one is `default`. Raises OAuthError
    invalid_scope for a scope that is not Mastodon's."""
    words = (text or "").replace("+", " ").split()
    if not words:
        words = default.split()
    if len(words) > MAX_SCOPES:
        raise OAuthError("invalid_scope", f"at most {MAX_SCOPES} scopes")
    for word in words:
        if word not in TOP and not _GRANULAR.fullmatch(word):
            raise OAuthError("invalid_scope", f"the scope {word[:50]!r} is not one this server knows: use read, "
                                              "write, follow, push or read:<x> / write:<x>")
    return frozenset(words)


def covers(granted: Iterable[str], needed: str) -> bool:
    """Whether scopes `granted` allow what scope `needed` names (e.g. 'write:statuses')."""
    have = set(granted)
    if needed in have:
        return True
    top = needed.split(":", 1)[0]
    if top in have and top in ("read", "write"):
        return True
    return needed in ("read:follows", "write:follows") and "follow" in have


def within(requested: frozenset[str], allowed: frozenset[str]) -> bool:
    """Whether every requested scope is covered by the app's registered ones."""
    return all(covers(allowed, scope) for scope in requested)


def parse_redirect_uris(text: str | None) -> tuple[str, ...]:
    """An app's redirect URIs: newline- or space-separated absolute URIs (or the out-of-band URN)."""
    uris = tuple((text or OOB).split())
    if not uris or len(uris) > MAX_REDIRECT_URIS:
        raise OAuthError("invalid_redirect_uri", f"give 1 to {MAX_REDIRECT_URIS} redirect URIs")
    for uri in uris:
        if len(uri) > MAX_URI_CHARS or not (uri == OOB or re.match(r"^[a-zA-Z][a-zA-Z0-9+.\-]*:\S+$", uri)):
            raise OAuthError("invalid_redirect_uri", "a redirect URI is absolute (scheme:...), or " + OOB)
        if uri.lower().startswith(("javascript:", "data:")):
            raise OAuthError("invalid_redirect_uri", "that redirect URI scheme is not allowed")
    return uris


def check_challenge(challenge: str | None, method: str | None) -> tuple[str | None, str | None]:
    """The PKCE challenge of an authorization request, as stored: (challenge, 'S256' | 'plain') or (None, None)."""
    if challenge is None:
        if method is not None:
            raise OAuthError("invalid_request", "code_challenge_method without code_challenge")
        return None, None
    method = method or "plain"
    if method not in ("S256", "plain"):
        raise OAuthError("invalid_request", "code_challenge_method is S256 or plain")
    if not _CHALLENGE.fullmatch(challenge):
        raise OAuthError("invalid_request", "code_challenge is 43 to 128 unreserved characters (RFC 7636)")
    return challenge, method


def verifier_matches(challenge: str | None, method: str | None, verifier: str | None) -> bool:
    """RFC 7636 4.6: the code's challenge against the exchange's code_verifier. Without a challenge, no verifier
    is needed (Mastodon.py and toot send none)."""
    if challenge is None:
        return True
    if verifier is None or not _VERIFIER.fullmatch(verifier):
        return False
    if method == "S256":
        derived = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode("ascii")).digest()).rstrip(b"=").decode()
    else:
        derived = verifier
    return hmac.compare_digest(derived, challenge)


def new_secret() -> str:
    return secrets.token_urlsafe(tokens.TOKEN_BYTES)


def scope_text(scopes: Iterable[str]) -> str:
    """Scopes as the Token's `scope` string, in a stable order (the top-level ones first, as Mastodon writes)."""
    order = {"read": 0, "write": 1, "follow": 2, "push": 3}
    return " ".join(sorted(set(scopes), key=lambda s: (order.get(s, 4), s)))
