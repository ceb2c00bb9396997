"""The notifier's pure parts: who a post mentions, the post lock order, its queue names and settings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.cli.status import _watched
from services.core import events as ev
from services.core.settings import SettingsError
from services.core.topology import Topology
from services.notifier import config
from services.notifier.effects import post_lock_keys
from services.notifier.mentions import MAX_MENTIONS, handles, recipients


def test_handles_are_the_distinct_mentions_in_order_lower_cased() -> None:
    body = "@Bob hi @carol_2, (@bob) @dave! mail@erin.com @x@y @" + "a" * 31 + " @é @frank's"
    assert handles(body) == ["bob", "carol_2", "dave", "frank"]


def test_recipients_skip_the_author_and_unknown_handles_and_stop_at_the_limit() -> None:
    users = {f"u{i}": i for i in range(1, 20)}
    named = ["nobody", "u1", *(f"u{i}" for i in range(2, 20)), "u2"]
    assert recipients(named, users, author_id=1) == list(range(2, 2 + MAX_MENTIONS))


@given(st.text(max_size=500))
def test_recipients_are_distinct_and_bounded_whatever_the_body(body: str) -> None:
    named = handles(body)
    found = recipients(named, {h: n for n, h in enumerate(named)}, author_id=0)
    assert len(found) == len(set(found)) <= MAX_MENTIONS and 0 not in found


def test_post_locks_are_taken_once_per_post_in_ascending_key_order() -> None:
    events = [ev.Event.new(ev.POST_CREATED, 5, {"post_id": 5, "author_id": 1}),
              ev.Event.new(ev.POST_DELETED, 9, {"post_id": 9, "author_id": 1}),
              ev.Event.new(ev.POST_DELETED, 5, {"post_id": 5, "author_id": 1}),
              ev.Event.new(ev.FOLLOW_CREATED, "1:2", {"follower_id": 1, "followee_id": 2})]
    assert post_lock_keys(events) == [-9, -5]  # negative: never a fan-out worker's (user id) key


def test_the_notifier_has_queues_of_its_own_on_the_fanout_bindings() -> None:
    t = Topology("p")
    assert t.notifier.queues() == ("p.notifier", "p.notifier.retry", "p.notifier.dead")
    assert t.notifier.exchanges() == ("p.events", "p.events.grouped", "p.notifier.settle")
    assert t.notifier.source == t.fanout.source == "p.events.grouped"  # groups for walfeed's consumers (ADR 0115)
    assert t.notifier.bindings == t.fanout.bindings and not set(t.notifier.queues()) & set(t.queues())
    assert [t.delivery_queue(c) for c in ("webhook", "email")] == ["p.deliveries.webhook", "p.deliveries.email"]
    assert t.delivery_binding("email") == ev.DELIVERY_EMAIL


def test_notifier_settings_have_their_own_prefix_and_defaults() -> None:
    s = config.from_env({}).consumer
    assert (s.batch_size, s.metrics_port, s.large_concurrency) == (config.BATCH_SIZE, config.METRICS_PORT, 0)
    with pytest.raises(SettingsError, match="WALFEED_NOTIFIER_RETRY_CAP"):
        config.from_env({"WALFEED_NOTIFIER_RETRY_BASE": "5", "WALFEED_NOTIFIER_RETRY_CAP": "1"})
    assert config.from_env({}).author == config.AuthorBudget(config.AUTHOR_DELIVERIES.default_value(),
                                                             config.AUTHOR_WINDOW.default_value())
    with pytest.raises(SettingsError, match="WALFEED_NOTIFIER_AUTHOR_DELIVERIES"):
        config.from_env({"WALFEED_NOTIFIER_AUTHOR_DELIVERIES": "-1"})



def test_status_watches_the_notifier_queues() -> None:
    shown = [name for name, _, hint in _watched(Topology("p")) if "notifier" in hint]
    assert shown == ["p.notifier", "p.notifier.retry", "p.notifier.dead"]
