"""Mastodon.py 2.3.3, unmodified, against the real processes (api, relay, worker, notifier): an app, the password
grant and the authorization-code flow (its login page posted as a browser posts it), verify_credentials, follow by
lookup, a post that reaches the follower's home timeline merged with a celebrity's pulled post, paging with
fetch_next / fetch_previous / since_id (each post once), notifications of a follow and a mention, delete."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
import pytest
from mastodon import Mastodon, MastodonNotFoundError

from testkit.waiting import eventually
from tests.integration.mastodon.conftest import PASSWORD, THRESHOLD, SignUp, Stack, read_page

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

SCOPES = ["read", "write", "follow", "push"]
OOB = "urn:ietf:wg:oauth:2.0:oob"


def _app(stack: Stack) -> tuple[str, str]:
    return Mastodon.create_app("walfeed tests", scopes=SCOPES, api_base_url=stack.base)


def _password_login(stack: Stack, app: tuple[str, str], handle: str) -> Mastodon:
    client = Mastodon(client_id=app[0], client_secret=app[1], api_base_url=stack.base)
    client.log_in(handle, PASSWORD, scopes=SCOPES)
    return client


def _code_login(stack: Stack, app: tuple[str, str], handle: str) -> Mastodon:
    """The authorization-code flow as a person in a browser goes through it: open the URL, fill in the form,
    submit it, copy the code the page shows; the app exchanges it."""
    client = Mastodon(client_id=app[0], client_secret=app[1], api_base_url=stack.base)
    url = client.auth_request_url(redirect_uris=OOB, scopes=SCOPES)
    with httpx.Client(timeout=30) as browser:
        page = browser.get(url)
        assert page.status_code == 200, page.text
        form = read_page(page.text)
        assert form.action == "/oauth/authorize" and "client_id" in form.fields
        fields = {**form.fields, "username": handle, "password": PASSWORD}
        shown = browser.post(stack.base + form.action, data=fields)
        assert shown.status_code == 200, shown.text
    code = read_page(shown.text).code
    assert code
    client.log_in(code=code, redirect_uri=OOB, scopes=SCOPES)
    return client


def _home_ids(client: Mastodon, **params: Any) -> list[int]:
    return [int(s["id"]) for s in client.timeline_home(**params)]


def _all_pages(client: Mastodon, limit: int) -> list[int]:
    seen: list[int] = []
    page = client.timeline_home(limit=limit)
    while page:
        seen += [int(s["id"]) for s in page]
        page = client.fetch_next(page)
    return seen


def test_mastodon_py_logs_in_follows_posts_pages_is_notified_and_deletes(stack: Stack, signup: SignUp,
                                                                         database_url: str) -> None:
    reader, author, star = signup("reader"), signup("author"), signup("star")
    fans = [signup(f"fan{i}") for i in range(THRESHOLD - 1)]
    app = _app(stack)
    alice = _password_login(stack, app, "reader")
    bob = _code_login(stack, app, "author")

    me = alice.account_verify_credentials()
    assert (me["id"], me["username"], me["acct"]) == (str(reader.id), "reader", "reader")
    assert bob.account_verify_credentials()["username"] == "author"

    found = alice.account_lookup("author")
    assert found["id"] == str(author.id)
    relationship = alice.account_follow(found["id"])
    assert relationship["following"] is True and relationship["id"] == str(author.id)
    alice.account_follow(alice.account_lookup("@star")["id"])
    for fan in fans:  # the star reaches the threshold: its posts are pulled at read time, not pushed
        assert stack.api.put(f"/v1/following/{star.id}", headers=fan.auth).status_code == 204

    posted = bob.status_post("hello @reader, from <Mastodon.py> & co")
    assert posted["content"] == "<p>hello @reader, from &lt;Mastodon.py&gt; &amp; co</p>"
    assert "scheduled_at" not in posted and posted["account"]["username"] == "author"
    star_post = stack.api.post("/v1/posts", json={"body": "a star's post"}, headers=star.auth).json()
    eventually(lambda: {int(posted["id"]), star_post["id"]} <= set(_home_ids(alice)), timeout=30,
               what="the followed author's post and the celebrity's pulled post in the home timeline")
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT fanned_out FROM posts WHERE id = %s", (star_post["id"],)).fetchone() == (False,)

    more = [int(bob.status_post(f"post {i}")["id"]) for i in range(5)]
    everything = sorted([int(posted["id"]), star_post["id"], *more], reverse=True)
    eventually(lambda: _home_ids(alice, limit=40) == everything, timeout=30, what="every post in the timeline")
    assert _all_pages(alice, limit=2) == everything  # fetch_next: each post once, newest first

    oldest_page = alice.timeline_home(max_id=everything[-3], limit=2)
    assert [int(s["id"]) for s in oldest_page] == everything[-2:]
    newer: list[int] = []
    page = alice.fetch_previous(oldest_page)
    while page:  # towards newer posts from the oldest page
        newer = [int(s["id"]) for s in page] + newer
        page = alice.fetch_previous(page)
    assert newer == everything[:-2]
    assert _home_ids(alice, since_id=everything[2]) == everything[:2]

    mentions = eventually(lambda: alice.notifications(types=["mention"]), timeout=30, what="the mention")
    assert [(n["type"], n["account"]["username"], n["status"]["id"]) for n in mentions] == [
        ("mention", "author", posted["id"])]
    follows = eventually(lambda: bob.notifications(exclude_types=["mention"]), timeout=30, what="the follow")
    assert [(n["type"], n["account"]["id"]) for n in follows] == [("follow", str(reader.id))]

    deleted = bob.status_delete(posted["id"])
    assert deleted["id"] == posted["id"] and deleted["text"].startswith("hello @reader")
    with pytest.raises(MastodonNotFoundError):
        bob.status(posted["id"])
    eventually(lambda: int(posted["id"]) not in _home_ids(alice, limit=40), timeout=30, what="deleted post gone")
