"""Bad input to the Mastodon layer gets Mastodon's error shape, `{"error": ...}` with a 4xx, never a 500 or a
problem document: a wrong password, a revoked token, a token without the scope, junk ids, oversized and malformed
bodies, and a fuzz of every Mastodon route with junk paths, parameters, bodies and tokens. The api runs in this
process on a real socket (tests/integration/api/conftest.py), on the test's own database."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mastodon import Mastodon, MastodonAPIError, MastodonIllegalArgumentError, MastodonUnauthorizedError

from tests.integration.api.conftest import MAX_BODY

pytestmark = pytest.mark.integration

PASSWORD = "correct horse battery staple"


def _errors(reply: httpx.Response, status: int) -> str:
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"].startswith("application/json")
    body = reply.json()
    assert isinstance(body, dict) and isinstance(body["error"], str) and body["error"]
    return str(body["error"])


def _account(api: httpx.Client, handle: str) -> dict[str, Any]:
    reply = api.post("/v1/users", json={"handle": handle, "password": PASSWORD})
    assert reply.status_code == 201, reply.text
    return dict(reply.json())


def _app(api: httpx.Client, scopes: str = "read write follow") -> dict[str, Any]:
    reply = api.post("/api/v1/apps", data={"client_name": "bad input", "scopes": scopes,
                                           "redirect_uris": "urn:ietf:wg:oauth:2.0:oob"})
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def _token(api: httpx.Client, app: dict[str, Any], handle: str, scope: str) -> str:
    reply = api.post("/oauth/token", data={"grant_type": "password", "client_id": app["client_id"],
                                           "client_secret": app["client_secret"], "username": handle,
                                           "password": PASSWORD, "scope": scope})
    assert reply.status_code == 200, reply.text
    assert reply.json()["scope"] == scope
    return str(reply.json()["access_token"])


def test_a_wrong_password_is_invalid_grant_as_mastodon_answers(api: httpx.Client, base: str) -> None:
    _account(api, "alice")
    app = _app(api)
    for username, password in (("alice", "not the password"), ("nobody", PASSWORD), ("", ""), ("ALICE", "x" * 9)):
        reply = api.post("/oauth/token", data={"grant_type": "password", "client_id": app["client_id"],
                                               "client_secret": app["client_secret"], "username": username,
                                               "password": password})
        assert _errors(reply, 400) == "invalid_grant" and reply.json()["error_description"]
    client = Mastodon(client_id=app["client_id"], client_secret=app["client_secret"], api_base_url=base)
    with pytest.raises(MastodonIllegalArgumentError, match="Invalid user name, password"):
        client.log_in("alice", "not the password", scopes=["read", "write", "follow"])
    bad_client = api.post("/oauth/token", data={"grant_type": "password", "client_id": app["client_id"],
                                                "client_secret": "wrong", "username": "alice", "password": PASSWORD})
    assert _errors(bad_client, 401) == "invalid_client"
    assert _errors(api.post("/oauth/token", data={"grant_type": "refresh_token"}), 400) == "unsupported_grant_type"


def test_a_revoked_token_is_refused_at_once(api: httpx.Client, base: str) -> None:
    _account(api, "alice")
    app = _app(api)
    client = Mastodon(client_id=app["client_id"], client_secret=app["client_secret"], api_base_url=base)
    client.log_in("alice", PASSWORD, scopes=["read", "write", "follow"])
    assert client.account_verify_credentials()["username"] == "alice"
    client.revoke_access_token()
    with pytest.raises(MastodonUnauthorizedError):
        client.account_verify_credentials()
    _errors(api.get("/api/v1/timelines/home", headers={"Authorization": f"Bearer {client.access_token}"}), 401)


def test_a_token_without_write_scope_cannot_post_or_follow(api: httpx.Client, base: str) -> None:
    bob = _account(api, "alice"), _account(api, "bob")
    app = _app(api)
    token = _token(api, app, "alice", "read")
    auth = {"Authorization": f"Bearer {token}"}
    assert _errors(api.post("/api/v1/statuses", data={"status": "hi"}, headers=auth), 403)
    assert _errors(api.post(f"/api/v1/accounts/{bob[1]['id']}/follow", headers=auth), 403)
    assert api.get("/api/v1/timelines/home", headers=auth).status_code == 200
    client = Mastodon(access_token=token, api_base_url=base)
    with pytest.raises(MastodonAPIError):
        client.status_post("not allowed")
    wider = api.post("/oauth/token", data={"grant_type": "password", "client_id": app["client_id"],
                                           "client_secret": app["client_secret"], "username": "alice",
                                           "password": PASSWORD, "scope": "read admin:write"})
    assert _errors(wider, 400) == "invalid_scope"
    narrow_app = _app(api, "read")
    beyond = api.post("/oauth/token", data={"grant_type": "password", "client_id": narrow_app["client_id"],
                                            "client_secret": narrow_app["client_secret"], "username": "alice",
                                            "password": PASSWORD, "scope": "read write"})
    assert _errors(beyond, 400) == "invalid_scope"
    app_token = api.post("/oauth/token", data={"grant_type": "client_credentials", "client_id": app["client_id"],
                                               "client_secret": app["client_secret"], "scope": "read"}).json()
    _errors(api.get("/api/v1/accounts/verify_credentials",
                    headers={"Authorization": f"Bearer {app_token['access_token']}"}), 422)


def test_junk_ids_oversized_and_malformed_bodies_are_mastodon_errors(api: httpx.Client) -> None:
    alice = _account(api, "alice")
    auth = {"Authorization": f"Bearer {alice['token']}"}  # the api's own token works here too
    for path in ("/api/v1/statuses/abc", "/api/v1/statuses/0", "/api/v1/statuses/99999999999999999999",
                 "/api/v1/statuses/-1", "/api/v1/accounts/%F0%9F%98%80", "/api/v1/accounts/123456789",
                 "/api/v1/notifications/x", "/api/v1/nothing/here", "/api/v2/instance"):
        assert _errors(api.get(path, headers=auth), 404)
    assert _errors(api.post("/api/v1/statuses", content=b"status=" + b"x" * MAX_BODY, headers={
        **auth, "content-type": "application/x-www-form-urlencoded"}), 413)
    assert _errors(api.post("/api/v1/statuses", content=b"{", headers={**auth, "content-type": "application/json"}),
                   400)
    assert _errors(api.post("/api/v1/statuses", json={"status": "x" * 501}, headers=auth), 422)
    assert _errors(api.post("/api/v1/statuses", json={"status": "  "}, headers=auth), 422)
    assert _errors(api.post("/api/v1/statuses", json={"status": "hi", "scheduled_at": "2030-01-01"}, headers=auth),
                   422)
    assert _errors(api.post("/api/v1/statuses", json={"status": "hi"}, headers={**auth, "Idempotency-Key": "a b"}),
                   422)
    assert _errors(api.put("/api/v1/statuses/1", headers=auth), 405)
    assert _errors(api.get("/api/v1/timelines/home", headers={"Authorization": "Bearer junk"}), 401)
    assert _errors(api.get("/api/v1/timelines/home"), 401)
    page = api.get("/api/v1/timelines/home", params={"limit": "1000", "max_id": "junk", "since_id": "-5"},
                   headers=auth)
    assert page.status_code == 200 and page.json() == []
    assert api.post("/api/v1/statuses", json={"status": "hi", "unknown": {"field": 1}, "sensitive": "0"},
                    headers=auth).status_code == 200
    for path in ("/api/v1/timelines/home", "/api/v1/notifications", "/api/v1/accounts/1/statuses"):
        older_than_zero = api.get(path, params={"max_id": "0"}, headers=auth)  # nothing, as Mastodon answers
        assert older_than_zero.status_code == 200 and older_than_zero.json() == [], path
        assert "link" not in older_than_zero.headers, path
    for position in ("min_id", "since_id"):  # above the largest id: nothing, not an overflow (a 500)
        above_all = api.get("/api/v1/timelines/home", params={position: str(2**63 - 1)}, headers=auth)
        assert above_all.status_code == 200 and above_all.json() == [], position


_PATHS = ["/api/v1/apps", "/api/v1/instance", "/api/v1/instance/", "/api/v1/accounts/verify_credentials",
          "/api/v1/accounts/{id}", "/api/v1/accounts/lookup", "/api/v1/accounts/relationships", "/api/v2/search",
          "/api/v1/accounts/{id}/follow", "/api/v1/accounts/{id}/unfollow", "/api/v1/accounts/{id}/statuses",
          "/api/v1/statuses", "/api/v1/statuses/{id}", "/api/v1/timelines/home", "/api/v1/notifications",
          "/api/v1/notifications/{id}", "/oauth/token", "/oauth/revoke", "/oauth/authorize", "/api/v1/{id}"]
_TEXT = st.text(st.characters(codec="utf-8"), max_size=40)
_VALUE = st.one_of(_TEXT, st.integers(), st.booleans(), st.none(), st.lists(_TEXT, max_size=3),
                   st.sampled_from(["1", "0", "true", "-1", "9" * 25, "read write", "password", "code"]))
_KEYS = st.sampled_from(["status", "limit", "max_id", "since_id", "min_id", "acct", "q", "types[]", "id[]",
                         "grant_type", "client_id", "client_secret", "username", "password", "scope", "code",
                         "redirect_uri", "client_name", "redirect_uris", "scopes", "token", "type",
                         "exclude_types[]", "pinned", "code_challenge", "code_challenge_method", "x"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(_PATHS), method=st.sampled_from(["GET", "POST", "DELETE", "PUT"]),
       record=st.one_of(st.sampled_from(["1", "2", "abc", "0", "99999999999999999999", "%00", "..%2f"]), _TEXT),
       params=st.dictionaries(_KEYS, _VALUE, max_size=6), encoding=st.sampled_from(["form", "json", "raw", "none"]),
       raw=st.binary(max_size=200), authorized=st.sampled_from(["full", "none", "junk"]))
def test_no_mastodon_route_answers_a_500_or_a_problem_document(
        api: httpx.Client, path: str, method: str, record: str, params: dict[str, Any], encoding: str, raw: bytes,
        authorized: str) -> None:
    token = _fuzz_token(api)
    choices: dict[str, dict[str, Any]] = {"full": {"Authorization": f"Bearer {token}"}, "none": {},
                                          "junk": {"Authorization": "Bearer \u00e9junk".encode("latin-1")}}
    headers = choices[authorized]
    url = path.replace("{id}", quote(record, safe="") or "x")
    flat = {k: v for k, v in params.items() if v is not None}
    kwargs: dict[str, Any] = {}
    if encoding == "json":
        kwargs["json"] = flat
    elif encoding == "form":
        kwargs["data"] = {k: v if isinstance(v, list) else str(v) for k, v in flat.items()}
    elif encoding == "raw":
        kwargs["content"] = raw
        headers = {**headers, "content-type": "application/json"}
    try:
        reply = api.request(method, url, headers=headers, params={"limit": flat.get("limit", "")} if flat else None,
                            **kwargs)
    except httpx.InvalidURL:
        return
    assert reply.status_code < 500, (method, url, kwargs, reply.text)
    if reply.status_code >= 400 and reply.headers.get("content-type", "").startswith("application/"):
        assert "problem" not in reply.headers["content-type"], (method, url, reply.text)
        assert isinstance(reply.json().get("error"), str), (method, url, reply.text)


_tokens: dict[str, str] = {}


def _fuzz_token(api: httpx.Client) -> str:
    """One account per test database (hypothesis runs the examples of one test on the same fixtures)."""
    key = str(api.base_url)
    if key not in _tokens:
        _tokens[key] = str(_account(api, "fuzz")["token"])
    return _tokens[key]
