"""OAuth as Mastodon clients and browsers use it, against the api in this process: the authorization-code flow
with PKCE and a redirect (state kept, the code used once), the login page's answers, passwords set after sign-up,
login rate limits, Idempotency-Key on statuses, and revocation scoped to the app."""

from __future__ import annotations

import base64
import hashlib
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from mastodon import Mastodon

from services.api.app import create_app
from services.api.config import ApiSettings
from services.api.ratelimit import Quota
from services.core.settings import Settings
from tests.integration.api.conftest import serve
from tests.integration.mastodon.conftest import read_page

pytestmark = pytest.mark.integration

PASSWORD = "correct horse battery staple"
CALLBACK = "https://app.example/callback"


def _account(api: httpx.Client, handle: str, password: str | None = PASSWORD) -> dict[str, Any]:
    reply = api.post("/v1/users", json={"handle": handle, **({"password": password} if password else {})})
    assert reply.status_code == 201, reply.text
    return dict(reply.json())


def _app(api: httpx.Client, redirect_uris: str = CALLBACK) -> dict[str, Any]:
    reply = api.post("/api/v1/apps", json={"client_name": "oauth tests", "redirect_uris": redirect_uris,
                                           "scopes": "read write follow push", "website": "https://app.example"})
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def _challenge(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def test_the_code_flow_with_pkce_redirects_with_the_state_and_the_code_works_once(api: httpx.Client) -> None:
    _account(api, "alice")
    app = _app(api)
    verifier = "a-verifier-of-enough-length-" + "x" * 30
    page = api.get("/oauth/authorize", params={
        "client_id": app["client_id"], "redirect_uri": CALLBACK, "response_type": "code", "scope": "read write",
        "state": "s t&ate", "code_challenge": _challenge(verifier), "code_challenge_method": "S256"})
    assert page.status_code == 200 and page.headers["x-frame-options"] == "DENY"
    form = read_page(page.text)
    assert form.fields["code_challenge"] == _challenge(verifier) and form.fields["state"] == "s t&ate"
    wrong = api.post("/oauth/authorize", data={**form.fields, "username": "alice", "password": "wrong password"})
    assert wrong.status_code == 401 and "Invalid username or password" in wrong.text
    sent = api.post("/oauth/authorize", data={**form.fields, "username": "alice", "password": PASSWORD})
    assert sent.status_code == 302
    location = urlsplit(sent.headers["location"])
    query = parse_qs(location.query)
    assert f"{location.scheme}://{location.netloc}{location.path}" == CALLBACK and query["state"] == ["s t&ate"]
    exchange = {"grant_type": "authorization_code", "client_id": app["client_id"], "code": query["code"][0],
                "redirect_uri": CALLBACK}
    bad_verifier = api.post("/oauth/token", data={**exchange, "code_verifier": "b" * 50})
    assert bad_verifier.status_code == 400 and bad_verifier.json()["error"] == "invalid_grant"
    # the failed exchange used the code up: a new authorization, then the right verifier (a public client: no secret)
    again = api.post("/oauth/authorize", data={**form.fields, "username": "alice", "password": PASSWORD})
    code = parse_qs(urlsplit(again.headers["location"]).query)["code"][0]
    token = api.post("/oauth/token", data={**exchange, "code": code, "code_verifier": verifier})
    assert token.status_code == 200, token.text
    assert token.json()["scope"] == "read write" and token.json()["token_type"] == "Bearer"
    reused = api.post("/oauth/token", data={**exchange, "code": code, "code_verifier": verifier})
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
    me = api.get("/api/v1/accounts/verify_credentials",
                 headers={"Authorization": f"Bearer {token.json()['access_token']}"})
    assert me.status_code == 200 and me.json()["username"] == "alice"


def test_a_code_without_a_challenge_is_not_exchanged_without_the_client_secret(api: httpx.Client) -> None:
    """A code asked for without PKCE (Mastodon.py and toot ask so) belongs to a client that has a secret: a stolen
    code and a made-up code_verifier do not make a token."""
    _account(api, "dave")
    app = _app(api)
    form = read_page(api.get("/oauth/authorize", params={
        "client_id": app["client_id"], "redirect_uri": CALLBACK, "response_type": "code", "scope": "read"}).text)
    exchange = {"grant_type": "authorization_code", "client_id": app["client_id"], "redirect_uri": CALLBACK}

    def code() -> str:
        sent = api.post("/oauth/authorize", data={**form.fields, "username": "dave", "password": PASSWORD})
        assert sent.status_code == 302, sent.text
        return parse_qs(urlsplit(sent.headers["location"]).query)["code"][0]

    stolen = api.post("/oauth/token", data={**exchange, "code": code(), "code_verifier": "v" * 50})
    assert stolen.status_code == 401 and stolen.json()["error"] == "invalid_client"
    with_secret = api.post("/oauth/token", data={**exchange, "code": code(), "client_secret": app["client_secret"]})
    assert with_secret.status_code == 200 and with_secret.json()["scope"] == "read"


def test_the_login_page_refuses_unknown_apps_and_redirects_not_registered(api: httpx.Client) -> None:
    app = _app(api)
    unknown = api.get("/oauth/authorize", params={"client_id": "nope", "redirect_uri": CALLBACK})
    assert unknown.status_code == 401 and "text/html" in unknown.headers["content-type"]
    elsewhere = api.get("/oauth/authorize", params={"client_id": app["client_id"],
                                                     "redirect_uri": "https://evil.example/cb"})
    assert elsewhere.status_code == 400 and "redirect uri" in elsewhere.text
    no_secret = api.post("/oauth/token", data={"grant_type": "authorization_code", "client_id": app["client_id"],
                                               "code": "x", "redirect_uri": CALLBACK})
    assert no_secret.status_code == 401 and no_secret.json()["error"] == "invalid_client"


def test_a_password_set_after_sign_up_is_the_one_that_logs_in(api: httpx.Client, base: str) -> None:
    account = _account(api, "bob", password=None)
    auth = {"Authorization": f"Bearer {account['token']}"}
    app = _app(api, "urn:ietf:wg:oauth:2.0:oob")
    client = Mastodon(client_id=app["client_id"], client_secret=app["client_secret"], api_base_url=base)
    login = {"grant_type": "password", "client_id": app["client_id"], "client_secret": app["client_secret"],
             "username": "bob", "scope": "read"}
    assert api.post("/oauth/token", data={**login, "password": PASSWORD}).status_code == 400  # none set yet
    assert api.put("/v1/users/me/password", json={"password": "short"}, headers=auth).status_code == 422
    assert api.put("/v1/users/me/password", json={"password": PASSWORD}, headers=auth).status_code == 204
    assert client.log_in("@bob", PASSWORD, scopes=["read"])
    assert api.put("/v1/users/me/password", json={"password": "another one entirely"}, headers=auth).status_code == 204
    assert api.post("/oauth/token", data={**login, "password": PASSWORD}).status_code == 400
    assert api.post("/oauth/token", data={**login, "password": "another one entirely"}).status_code == 200
    assert client.account_verify_credentials()["username"] == "bob"  # tokens issued before keep working
    assert api.get("/v1/users/me", headers=auth).status_code == 200  # and so does the api's own token
    assert api.post("/v1/users", json={"handle": "carol", "password": "x" * 300}).status_code == 422


def test_logins_are_rate_limited_per_client_address_as_sign_ups(settings: Settings) -> None:
    limited = ApiSettings(pool_min=1, pool_max=4, signup_limit=Quota("signup", 3, 3600),
                          write_limit=Quota("write", 1000, 60))
    with serve(create_app(settings, limited)) as url, httpx.Client(base_url=url, timeout=30) as api:
        _account(api, "dave")
        app = _app(api)
        login = {"grant_type": "password", "client_id": app["client_id"], "client_secret": app["client_secret"],
                 "username": "dave", "password": "wrong password"}
        here = {"X-Forwarded-For": "203.0.113.9"}
        assert [api.post("/oauth/token", data=login, headers=here).status_code for _ in range(3)] == [400] * 3
        refused = api.post("/oauth/token", data={**login, "password": PASSWORD}, headers=here)
        assert refused.status_code == 429 and refused.json()["error"].startswith("too many requests")
        assert int(refused.headers["retry-after"]) >= 1
        elsewhere = api.post("/oauth/token", data={**login, "password": PASSWORD},
                             headers={"X-Forwarded-For": "203.0.113.10"})
        assert elsewhere.status_code == 200


def test_an_idempotency_key_answers_the_same_status_and_revocation_is_the_apps_own(api: httpx.Client,
                                                                                  base: str) -> None:
    _account(api, "erin")
    app, other = _app(api, "urn:ietf:wg:oauth:2.0:oob"), _app(api, "urn:ietf:wg:oauth:2.0:oob")
    client = Mastodon(client_id=app["client_id"], client_secret=app["client_secret"], api_base_url=base)
    client.log_in("erin", PASSWORD, scopes=["read", "write"])
    first = client.status_post("once", idempotency_key="key-1")
    assert client.status_post("once", idempotency_key="key-1")["id"] == first["id"]
    reused = api.post("/api/v1/statuses", json={"status": "another text"},
                      headers={"Authorization": f"Bearer {client.access_token}", "Idempotency-Key": "key-1"})
    assert reused.status_code == 422 and "Idempotency-Key" in reused.json()["error"]
    assert [s["id"] for s in client.account_statuses(client.me()["id"])] == [first["id"]]
    revoke = api.post("/oauth/revoke", data={"client_id": other["client_id"], "client_secret": other["client_secret"],
                                             "token": client.access_token})
    assert revoke.status_code == 200 and revoke.json() == {}
    assert client.account_verify_credentials()["username"] == "erin"  # another app cannot revoke it
