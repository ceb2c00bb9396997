"""The Mastodon layer's pure parts: OAuth scopes, redirect URIs and PKCE; parameter parsing (forms, JSON, booleans,
ids, clamped limits); paging and its Link header; the entities' shapes."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.api import oauth, paging, passwords
from services.api.cursor import MAX_ID
from services.api.mastodon import entities, pages
from services.api.mastodon.errors import MastodonError, _as_error, edge_error
from services.api.mastodon.notifications import kinds
from services.api.mastodon.params import Params, parse_body, record_id
from services.api.mastodon.streamhub import END, Hub, Message, Stream, sse
from services.api.mastodon.streaming import Subscriptions
from services.api.oauth import OAuthError


def test_scopes_parse_and_cover_as_mastodons_do() -> None:
    assert oauth.parse_scopes("read write follow push") == {"read", "write", "follow", "push"}
    assert oauth.parse_scopes("") == {"read"} and oauth.parse_scopes("read+write") == {"read", "write"}
    with pytest.raises(OAuthError):
        oauth.parse_scopes("read admin")
    assert oauth.covers({"read"}, "read:statuses") and oauth.covers({"write"}, "write:follows")
    assert oauth.covers({"follow"}, "write:follows") and not oauth.covers({"follow"}, "write:statuses")
    assert not oauth.covers({"read"}, "write:statuses") and oauth.covers({"write:statuses"}, "write:statuses")
    assert oauth.within(frozenset({"read:statuses"}), frozenset({"read"}))
    assert not oauth.within(frozenset({"write"}), frozenset({"read", "follow"}))
    assert oauth.scope_text({"push", "follow", "read", "write"}) == "read write follow push"


def test_redirect_uris_are_absolute_or_out_of_band() -> None:
    assert oauth.parse_redirect_uris(None) == (oauth.OOB,)
    assert oauth.parse_redirect_uris("https://a.example/cb\nurn:ietf:wg:oauth:2.0:oob") == (
        "https://a.example/cb", oauth.OOB)
    for bad in ("/relative", "javascript:alert(1)", "x" * 3000):
        with pytest.raises(OAuthError):
            oauth.parse_redirect_uris(bad)


def test_pkce_s256_and_plain() -> None:
    verifier = "v" * 50
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    assert oauth.check_challenge(challenge, "S256") == (challenge, "S256")
    assert oauth.verifier_matches(challenge, "S256", verifier)
    assert not oauth.verifier_matches(challenge, "S256", "w" * 50) and not oauth.verifier_matches(challenge, "S256",
                                                                                                None)
    assert oauth.verifier_matches(verifier, "plain", verifier) and oauth.verifier_matches(None, None, None)
    with pytest.raises(OAuthError):
        oauth.check_challenge("short", "S256")
    with pytest.raises(OAuthError):
        oauth.check_challenge(challenge, "MD5")


def test_passwords_hash_with_argon2id_and_unknown_accounts_never_verify() -> None:
    stored = passwords.hash_now("a long enough password")
    assert stored.startswith("$argon2id$")
    assert passwords.verify_now(stored, "a long enough password")
    assert not passwords.verify_now(stored, "another password")
    assert not passwords.verify_now(None, "a long enough password") and not passwords.verify_now("junk", "x" * 9)
    assert passwords.problem("short") and passwords.problem("x" * 257) and passwords.problem("nul\x00 in it")
    assert passwords.problem("eight ch") is None


def test_forms_and_json_bodies_give_the_same_parameters() -> None:
    form = parse_body("application/x-www-form-urlencoded", b"status=hi&types[]=follow&types[]=mention&x=1")
    data = parse_body("application/json; charset=utf-8", b'{"status": "hi", "types": ["follow", "mention"]}')
    for params in (Params(form), Params(data)):
        assert params.text("status") == "hi" and params.strings("types") == ["follow", "mention"]
    assert parse_body("", b"") == {} and parse_body("application/json", b"  ") == {}
    for content_type, body, status in (("application/json", b"[1]", 422), ("application/json", b"{", 400),
                                       ("multipart/form-data; boundary=x", b"--x", 415),
                                       ("text/plain", b"hi", 415)):
        with pytest.raises(MastodonError) as raised:
            parse_body(content_type, body)
        assert raised.value.status == status


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("true", True), ("0", False), ("false", False),
                                                 (True, True), (False, False), (None, False)])
def test_booleans_are_0_1_true_false(value: object, expected: bool) -> None:
    assert Params({"b": value}).boolean("b") is expected


def test_a_boolean_that_is_none_of_those_is_a_422() -> None:
    with pytest.raises(MastodonError):
        Params({"b": "maybe"}).boolean("b")


@given(st.one_of(st.none(), st.text(max_size=30), st.integers()))
def test_limits_are_clamped_never_refused(value: object) -> None:
    assert 1 <= Params({"limit": value}).limit() <= 40


@given(st.text(max_size=40))
def test_a_path_id_is_a_positive_bigint_or_not_found(value: str) -> None:
    try:
        parsed = record_id(value)
    except MastodonError as exc:
        assert exc.status == 404
    else:
        assert 0 < parsed <= MAX_ID and parsed == int(value)


def test_paging_ids_become_ranges() -> None:
    assert pages.page_range(Params({}), 20) == paging.Range(0, MAX_ID, "newest", 21)
    assert pages.page_range(Params({"max_id": "50"}), 2) == paging.Range(0, 50, "newest", 3)
    assert pages.page_range(Params({"since_id": "7", "max_id": "50"}), 2) == paging.Range(7, 50, "newest", 3)
    assert pages.page_range(Params({"min_id": "7"}), 2) == paging.Range(7, MAX_ID, "oldest", 3)
    assert pages.page_range(Params({"max_id": "junk"}), 2) == paging.Range(0, MAX_ID, "newest", 3)
    assert pages.page_range(Params({"max_id": "0"}), 2) == paging.Range(0, 0, "newest", 3)  # nothing, as Mastodon
    items, more = pages.cut(paging.Range(7, MAX_ID, "oldest", 3), [8, 9, 10], 2)
    assert (items, more) == ([9, 8], True)


def test_the_link_header_points_past_both_ends_and_keeps_the_other_parameters() -> None:
    params = Params({"limit": "2", "types[]": ["follow"], "max_id": "9"})
    link = pages.link("http://h/api/v1/notifications", params, paging.Range(0, 9, "newest", 3), 8, 7, True)
    assert link == ('<http://h/api/v1/notifications?limit=2&types%5B%5D=follow&max_id=7>; rel="next", '
                    '<http://h/api/v1/notifications?limit=2&types%5B%5D=follow&min_id=8>; rel="prev"')
    last = pages.link("http://h/x", Params({}), paging.Range(), 8, 7, False)
    assert last == '<http://h/x?min_id=8>; rel="prev"'
    assert pages.link("http://h/x", Params({}), paging.Range(), None, None, False) is None


def test_notification_kinds_filter() -> None:
    assert kinds([], []) == ["follow", "mention"]
    assert kinds(["mention", "favourite"], []) == ["mention"]
    assert kinds([], ["follow"]) == ["mention"] and kinds(["favourite"], []) == []


def test_a_status_is_mastodons_shape_without_scheduled_at() -> None:
    site = entities.Site("https://feed.example", "feed.example")
    moment = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    author = entities.account({"id": 7, "handle": "alice", "follower_count": 1, "following_count": 2,
                               "created_at": moment, "statuses_count": 3}, site)
    status = entities.status({"id": 42, "author_id": 7, "body": "a <b> & c\n\nd", "created_at": moment}, author, site)
    assert status["id"] == "42" and status["account"]["id"] == "7" and "scheduled_at" not in status
    assert status["content"] == "<p>a &lt;b&gt; &amp; c</p><p>d</p>"
    assert status["created_at"] == "2026-01-02T03:04:05.678Z"
    assert status["url"] == "https://feed.example/@alice/42"
    assert all(status[k] == [] for k in ("media_attachments", "mentions", "tags", "emojis"))
    assert entities.instance(site, "wss://feed.example", 1, 2)["version"].startswith("4.2.0 ")


def test_a_problem_document_becomes_mastodons_error() -> None:
    assert _as_error(b'{"type": "t", "title": "x", "status": 413, "detail": "too large"}') == b'{"error":"too large"}'
    assert _as_error(b"not json") == b'{"error":"error"}'
    assert edge_error("/api/v1/statuses", 413, "too large").body == b'{"error":"too large"}'
    assert edge_error("/v1/posts", 413, "too large").media_type == "application/problem+json"


def _stream(user: int, size: int = 4) -> Stream:
    return Stream(user, None, asyncio.Queue(maxsize=size))


def test_the_hub_routes_a_post_to_its_authors_and_followers_streams_only() -> None:
    hub = Hub()
    reader, other, author_own = _stream(1), _stream(2), _stream(3)
    assert hub.open(reader) and hub.open(other) and hub.open(author_own)
    hub.followed(1, [3, 4])
    hub.followed(2, [4])
    second = _stream(1)
    assert not hub.open(second)  # the user's followees are loaded already
    assert set(map(id, hub.home_streams(3))) == {id(reader), id(second), id(author_own)}
    assert set(map(id, hub.home_streams(4))) == {id(reader), id(second), id(other)}
    hub.follow_changed(2, 3, following=True)
    hub.follow_changed(1, 4, following=False)
    hub.follow_changed(99, 3, following=True)  # not a user of this process: nothing kept
    assert set(map(id, hub.home_streams(4))) == {id(other)}
    assert id(other) in set(map(id, hub.home_streams(3))) and not hub.holds(99)
    for stream in (reader, second, other, author_own):
        hub.close(stream)
    assert len(hub) == 0 and hub.entries() == 0 and hub.home_streams(3) == []


def test_a_slow_stream_is_cut_off_when_its_queue_is_full_and_end_wakes_its_reader() -> None:
    slow = _stream(1, size=2)
    assert slow.offer(Message("update", "{}")) and slow.offer(Message("update", "{}"))
    assert not slow.offer(Message("update", "{}")) and slow.closed
    idle = _stream(2)
    idle.end()
    assert idle.closed and idle.queue.get_nowait() is END
    assert sse(Message("delete", "42")) == b"event: delete\ndata: 42\n\n"


def test_a_token_change_ends_its_users_streams_and_a_lost_listener_ends_them_all() -> None:
    hub = Hub()
    mine, again, theirs = _stream(1), _stream(1), _stream(2)
    for stream in (mine, again, theirs):
        hub.open(stream)
    hub.forget_user(1)  # a token of user 1 revoked or rotated, here or on another process
    assert mine.closed and again.closed and mine.queue.get_nowait() is END and not theirs.closed
    hub.listening(False)  # a change may be missed while the listener is away
    assert theirs.closed and theirs.queue.get_nowait() is END


def test_streams_admitted_together_beyond_a_bound_end_once_registered() -> None:
    hub = Hub()
    first, second, third = _stream(1), _stream(1), _stream(1)
    assert all(hub.admits(1, 10, 2) for _ in range(3))  # three requests checked before any registered
    results = []
    for stream in (first, second, third):  # each registered and checked with no await in between
        hub.open(stream)
        results.append(hub.within(stream, 10, 2))
    assert results == [True, True, False] and not hub.admits(1, 10, 2) and hub.admits(2, 10, 2)
    hub.close(third)
    assert not hub.admits(2, 2, 5)  # the process's bound, whoever asks


def test_a_websocket_subscribes_only_to_what_its_token_may_read() -> None:
    narrow = Subscriptions(statuses=True, notifications=False)
    assert narrow.allows("user") and not narrow.allows("user:notification")
    assert Subscriptions(statuses=False, notifications=True).allows("user:notification")


def test_a_status_assembled_from_its_head_and_account_is_the_status() -> None:
    site = entities.Site("https://feed.example", "feed.example")
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    author = entities.account({"id": 7, "handle": "alice", "follower_count": 1, "following_count": 2,
                               "created_at": moment}, site)
    row = {"id": 42, "author_id": 7, "body": "hi \"there\"", "created_at": moment}
    assembled = entities.status_head(row, "alice", site) + orjson.dumps(author) + b"}"
    assert orjson.loads(assembled) == entities.status(row, author, site)
