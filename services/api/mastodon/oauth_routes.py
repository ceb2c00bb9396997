"""OAuth 2 for Mastodon clients (docs/mastodon.md, docs/adr/0141): app registration, the authorization-code flow
with its login page (PKCE optional), the password and client-credentials grants, revocation. Logins are rate-limited
per client address as sign-ups are; a wrong password answers Doorkeeper's `invalid_grant` as Mastodon does."""

from __future__ import annotations

import base64
import binascii
import html
import re
from typing import Any, Final
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from services.api import oauth, passwords, ratelimit, tokens
from services.api.deps import database, throttle
from services.api.mastodon import entities, store
from services.api.mastodon.errors import MastodonError
from services.api.mastodon.params import Params, gather
from services.api.mastodon.views import json
from services.api.models import HANDLE_PATTERN
from services.api.oauth import OAuthError
from services.api.ratelimit import Quota
from services.api.store import Conn, Row

router = APIRouter(include_in_schema=False)

BAD_GRANT: Final = ("The provided authorization grant is invalid, expired, revoked, does not match the redirection "
                    "URI used in the authorization request, or was issued to another client.")
BAD_CLIENT: Final = ("Client authentication failed due to unknown client, no client authentication included, or "
                     "unsupported authentication method.")
_PAGE_HEADERS: Final = {"X-Frame-Options": "DENY", "Content-Security-Policy": "frame-ancestors 'none'",
                        "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}


def _quota(request: Request, policy: str) -> Quota:
    """Sign-up's limit, counted apart for logins and app registrations."""
    signup: Quota = request.app.state.api_settings.signup_limit
    return Quota(policy, signup.limit, signup.window)


def _client(request: Request) -> str:
    return ratelimit.client_subject(request.client.host if request.client else None)


def _oauth_error(exc: OAuthError) -> MastodonError:
    return MastodonError(exc.status, exc.error, description=exc.description)


@router.post("/api/v1/apps")
async def create_app(request: Request) -> Response:
    params = await gather(request)
    name = params.text("client_name", 200)
    if not name or not name.strip():
        raise MastodonError(422, "Validation failed: Application name can't be blank")
    try:
        uris = oauth.parse_redirect_uris(params.text("redirect_uris", 20_000))
        scopes = oauth.parse_scopes(params.text("scopes", 2000))
    except OAuthError as exc:
        raise MastodonError(422, f"Validation failed: {exc.description}") from None
    website = params.text("website", 2000) or None
    secret = oauth.new_secret()
    async with database(request) as db:
        await throttle(request, db, _quota(request, "apps"), _client(request))
        row = await store.create_app(db, oauth.new_secret(), tokens.token_hash(secret), name.strip(), website, uris,
                                     sorted(scopes))
    return json(entities.application(row, secret))


def _basic(request: Request) -> tuple[str | None, str | None]:
    """client_id and client_secret of an `Authorization: Basic` header (RFC 6749 2.3.1), if any."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None, None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None, None
    client_id, sep, secret = decoded.partition(":")
    return (client_id, secret) if sep else (None, None)


async def _app(db: Conn, params: Params, request: Request, *, secret_required: bool = True) -> Row:
    """The client the request authenticates as (401 invalid_client otherwise)."""
    basic_id, basic_secret = _basic(request)
    client_id = params.text("client_id", 200) or basic_id
    secret = params.text("client_secret", 200) or basic_secret
    app = None if client_id is None else await store.app(db, client_id)
    if app is None or (secret is None and secret_required) or (
            secret is not None and not tokens.matches(app["secret_hash"], secret)):
        raise MastodonError(401, "invalid_client", description=BAD_CLIENT)
    return app


def _handle(username: str | None) -> str | None:
    """The handle of a login name: `alice`, `@alice` or `alice@this.host` (case-insensitive)."""
    if not username:
        return None
    handle = username.strip().lstrip("@").split("@", 1)[0].lower()
    return handle if re.fullmatch(HANDLE_PATTERN, handle) else None


async def _check_password(request: Request, username: str | None, password: str | None) -> int | None:
    """The user whose handle and password these are, else None; every attempt counts against the login limit."""
    async with database(request) as db:
        await throttle(request, db, _quota(request, "login"), _client(request))
        handle = _handle(username)
        row = None if handle is None else await store.credentials(db, handle)
    stored = None if row is None else row["password_hash"]
    if not await passwords.verify(stored, (password or "")[:passwords.MAX_CHARS]):
        return None
    assert row is not None
    return int(row["id"])


async def _issue(db: Conn, app: Row, user: int | None, scopes: frozenset[str]) -> Response:
    access = oauth.new_secret()
    row = await store.create_token(db, tokens.token_hash(access), int(app["id"]), user, sorted(scopes))
    return json(entities.token(access, oauth.scope_text(scopes), row["created_at"]),
                headers={"Cache-Control": "no-store", "Pragma": "no-cache"})


def _requested(params: Params, app: Row) -> frozenset[str]:
    scopes = oauth.parse_scopes(params.text("scope", 2000), default=" ".join(app["scopes"]))
    if not oauth.within(scopes, frozenset(app["scopes"])):
        raise OAuthError("invalid_scope", "The requested scope is invalid, unknown, or malformed.")
    return scopes


@router.post("/oauth/token")
async def token(request: Request) -> Response:
    params = await gather(request)
    grant_type = params.text("grant_type", 100)
    try:
        if grant_type == "password":
            async with database(request) as db:
                app = await _app(db, params, request)
                scopes = _requested(params, app)
            user = await _check_password(request, params.text("username", 400), params.text("password", 10_000))
            if user is None:
                raise OAuthError("invalid_grant", BAD_GRANT)
            async with database(request) as db:
                return await _issue(db, app, user, scopes)
        if grant_type == "authorization_code":
            return await _exchange(request, params)
        if grant_type == "client_credentials":
            async with database(request) as db:
                app = await _app(db, params, request)
                return await _issue(db, app, None, _requested(params, app))
    except OAuthError as exc:
        raise _oauth_error(exc) from None
    raise MastodonError(400, "unsupported_grant_type",
                        description="grant_type is password, authorization_code or client_credentials")


async def _exchange(request: Request, params: Params) -> Response:
    code = params.text("code", 200)
    verifier = params.text("code_verifier", 200)
    async with database(request) as db:
        # A client may leave its secret out only for a code it asked with a PKCE challenge (a public client: RFC
        # 7636), which is known once the code is taken; a verifier sent for a code without one stands for nothing.
        app = await _app(db, params, request, secret_required=verifier is None)
        taken = None if code is None else await store.take_code(db, tokens.token_hash(code))
        redirect = params.text("redirect_uri", oauth.MAX_URI_CHARS) or oauth.OOB
        if taken is None or not taken["fresh"] or int(taken["app_id"]) != int(app["id"]) \
                or taken["redirect_uri"] != redirect \
                or not oauth.verifier_matches(taken["challenge"], taken["challenge_method"], verifier):
            raise OAuthError("invalid_grant", BAD_GRANT)
        if taken["challenge"] is None and params.text("client_secret", 200) is None and _basic(request)[1] is None:
            raise OAuthError("invalid_client", BAD_CLIENT, 401)
        return await _issue(db, app, int(taken["user_id"]), frozenset(taken["scopes"]))


@router.post("/oauth/revoke")
async def revoke(request: Request) -> Response:
    """RFC 7009: 200 whether or not the token was valid; a token of another app is left alone."""
    params = await gather(request)
    async with database(request) as db:
        app = await _app(db, params, request)
        value = params.text("token", 200)
        user = None if value is None else await store.revoke_token(db, tokens.token_hash(value), int(app["id"]))
    if user is not None:  # at once here; on the other processes when the notification arrives (ADR 0035)
        request.app.state.token_changes.forget_user(user)  # the caches, and the user's streams here
    return json({})


# The login page of the authorization-code flow: plain HTML, no script, no session: the form carries the request.

_FIELDS: Final = ("client_id", "redirect_uri", "scope", "state", "code_challenge", "code_challenge_method",
                  "response_type")


_Authorization = tuple[Row, str, frozenset[str], tuple[str | None, str | None]]  # app, redirect, scopes, PKCE


async def _authorization(db: Conn, params: Params) -> _Authorization:
    app = None
    client_id = params.text("client_id", 200)
    if client_id is not None:
        app = await store.app(db, client_id)
    if app is None:
        raise OAuthError("invalid_client", BAD_CLIENT, 401)
    if (params.text("response_type", 50) or "code") != "code":
        raise OAuthError("unsupported_response_type", "response_type is code")
    redirect = params.text("redirect_uri", oauth.MAX_URI_CHARS) or oauth.OOB
    if redirect not in app["redirect_uris"]:
        raise OAuthError("invalid_redirect_uri", "The redirect uri included is not valid.")
    scopes = _requested(params, app)
    challenge = oauth.check_challenge(params.text("code_challenge", 200), params.text("code_challenge_method", 20))
    return app, redirect, scopes, challenge


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
                        f"</title></head><body><h1>{html.escape(title)}</h1>{body}</body></html>",
                        status_code=status, headers=_PAGE_HEADERS)


def _form(params: Params, app: Row, scopes: frozenset[str], message: str | None = None,
          status: int = 200) -> HTMLResponse:
    hidden = "".join(f'<input type="hidden" name="{name}" value="{html.escape(value)}">'
                     for name in _FIELDS if (value := params.text(name, oauth.MAX_URI_CHARS)) is not None)
    error = f'<p role="alert">{html.escape(message)}</p>' if message else ""
    return _page("Sign in", (
        f"<p>{html.escape(app['name'])} asks for: {html.escape(oauth.scope_text(scopes))}</p>{error}"
        f'<form method="post" action="/oauth/authorize">{hidden}'
        '<label>Username <input name="username" autocomplete="username" required></label> '
        '<label>Password <input name="password" type="password" autocomplete="current-password" required></label> '
        '<button type="submit">Authorize</button></form>'), status)


async def _asked(request: Request) -> tuple[Params, _Authorization] | Response:
    """The authorization request's parameters and what they ask for, or the page saying why not."""
    params = await gather(request)
    try:
        async with database(request) as db:
            return params, await _authorization(db, params)
    except OAuthError as exc:
        return _page("Authorization failed", f"<p>{html.escape(exc.description)}</p>", exc.status)


@router.get("/oauth/authorize")
@router.get("/oauth/authorize/")
async def authorize_page(request: Request) -> Response:
    asked = await _asked(request)
    if isinstance(asked, Response):
        return asked
    params, (app, _, scopes, _) = asked
    return _form(params, app, scopes)


@router.post("/oauth/authorize")
@router.post("/oauth/authorize/")
async def authorize(request: Request) -> Response:
    asked = await _asked(request)
    if isinstance(asked, Response):
        return asked
    params, (app, redirect, scopes, (challenge, method)) = asked
    user = await _check_password(request, params.text("username", 400), params.text("password", 10_000))
    if user is None:
        return _form(params, app, scopes, "Invalid username or password.", 401)
    code = oauth.new_secret()
    async with database(request) as db:
        await store.create_code(db, tokens.token_hash(code), int(app["id"]), user, redirect, sorted(scopes),
                                challenge, method, oauth.CODE_SECONDS)
    if redirect == oauth.OOB:
        return _page("Authorization code", f"<p>Copy this code into the application:</p><p><code id=\"code\">"
                                           f"{html.escape(code)}</code></p>")
    query: dict[str, Any] = {"code": code}
    state = params.text("state", 2000)
    if state is not None:
        query["state"] = state
    separator = "&" if "?" in redirect else "?"
    return RedirectResponse(redirect + separator + urlencode(query), status_code=302, headers=_PAGE_HEADERS)
