"""Pure parts of the polling source: settings, claim sizing, poll pacing, marking, the claim bookkeeping."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.cdc_relay import poll_sql
from services.cdc_relay.poll_policy import MARK_MIN_GAP, Claims, PollSettings, claim_size, mark_due, next_poll_delay
from services.core.events import encode
from services.core.settings import SettingsError


def test_settings_defaults_and_overrides() -> None:
    assert PollSettings.from_env({}) == PollSettings(interval=1.0, batch=500, lease=30.0)
    got = PollSettings.from_env({"WALFEED_POLL_INTERVAL": "0.1", "WALFEED_POLL_BATCH": "50",
                                 "WALFEED_POLL_LEASE": "2"})
    assert got == PollSettings(interval=0.1, batch=50, lease=2.0)


@pytest.mark.parametrize(("name", "value"), [("WALFEED_POLL_INTERVAL", "soon"), ("WALFEED_POLL_BATCH", "0"),
                                             ("WALFEED_POLL_LEASE", "0.1"), ("WALFEED_POLL_BATCH", "1.5")])
def test_bad_settings_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        PollSettings.from_env({name: value})


def test_claim_size_is_bounded_by_the_window() -> None:
    assert claim_size(batch=500, window=1000, in_flight=0) == 500
    assert claim_size(batch=500, window=1000, in_flight=700) == 300
    assert claim_size(batch=500, window=1000, in_flight=1000) == 0
    assert claim_size(batch=500, window=1000, in_flight=751) == 0  # less than half a batch of room: wait
    assert claim_size(batch=500, window=1000, in_flight=750) == 250
    assert claim_size(batch=500, window=100, in_flight=0) == 100
    assert claim_size(batch=1, window=1, in_flight=0) == 1
    assert claim_size(batch=500, window=1000, in_flight=1200) == 0  # re-claimed duplicates can overshoot


def test_a_full_batch_polls_again_at_once_a_short_one_waits() -> None:
    assert next_poll_delay(asked=500, got=500, interval=1.0) == 0.0
    assert next_poll_delay(asked=500, got=499, interval=1.0) == 1.0
    assert next_poll_delay(asked=500, got=0, interval=0.1) == 0.1
    assert next_poll_delay(asked=0, got=0, interval=1.0) == 1.0


def test_marks_are_batched_unless_stopping() -> None:
    assert not mark_due(pending=0, batch=500, since_last=10.0, stopping=True)
    assert not mark_due(pending=10, batch=500, since_last=MARK_MIN_GAP / 2, stopping=False)
    assert mark_due(pending=10, batch=500, since_last=MARK_MIN_GAP, stopping=False)
    assert mark_due(pending=500, batch=500, since_last=0.0, stopping=False)
    assert mark_due(pending=1, batch=500, since_last=0.0, stopping=True)


def test_claims_move_from_in_flight_to_marks() -> None:
    claims = Claims()
    claims.claimed(["b", "a", "c"])
    assert claims.in_flight == 3
    claims.confirmed(["a", "b", "zz"])  # "zz" is not ours: ignored
    assert claims.in_flight == 1
    assert claims.take_marks() == ["a", "b"]
    assert claims.pending_marks == 0
    claims.confirmed(["a"])  # a second confirm of a settled id changes nothing
    assert (claims.in_flight, claims.pending_marks) == (1, 0)


def test_an_id_claimed_twice_counts_twice_and_is_marked_once() -> None:
    claims = Claims()
    claims.claimed(["a"])
    claims.claimed(["a"])  # our lease ran out while the broker was slow; we claimed it again
    claims.confirmed(["a"])
    assert claims.in_flight == 1
    claims.confirmed(["a"])
    assert claims.in_flight == 0
    assert claims.take_marks() == ["a"]


def test_failed_marks_are_kept() -> None:
    claims = Claims()
    claims.claimed(["a", "b"])
    claims.confirmed(["a", "b"])
    ids = claims.take_marks()
    claims.mark_failed(ids)
    assert claims.take_marks() == ["a", "b"]


@given(st.lists(st.tuples(st.sampled_from(["claim", "confirm"]), st.lists(st.sampled_from("abcdef"), max_size=4))))
def test_in_flight_never_negative_and_matches_claims(ops: list[tuple[str, list[str]]]) -> None:
    claims, outstanding = Claims(), 0
    counts: dict[str, int] = {}
    for op, ids in ops:
        if op == "claim":
            claims.claimed(ids)
            for i in ids:
                counts[i] = counts.get(i, 0) + 1
            outstanding += len(ids)
        else:
            claims.confirmed(ids)
            for i in ids:
                if counts.get(i):
                    counts[i] -= 1
                    outstanding -= 1
        assert claims.in_flight == outstanding >= 0


def test_a_claimed_row_becomes_the_same_envelope_as_the_cdc_source() -> None:
    event_id = uuid.uuid4()
    created = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    event = poll_sql.row_event((event_id, "post", "7", "post.created", {"post_id": 7, "author_id": 1}, created))
    assert (event.id, event.type, event.aggregate_type, event.aggregate_id) == (event_id, "post.created", "post", "7")
    assert event.occurred_at == created and event.payload == {"post_id": 7, "author_id": 1}
    assert b'"occurred_at":"2026-01-02T03:04:05.678000Z"' in encode(event)


def test_a_row_without_a_timestamp_is_refused() -> None:
    with pytest.raises(TypeError, match="created_at"):
        poll_sql.row_event((uuid.uuid4(), "post", "7", "post.created", {}, "yesterday"))


def test_claimed_rows_are_published_in_claim_order() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    a, b, c = (uuid.UUID(int=n) for n in (3, 1, 2))
    later = t0 + timedelta(seconds=1)
    rows: list[poll_sql.Row] = [(a, "", "", "", {}, t0), (b, "", "", "", {}, later), (c, "", "", "", {}, t0)]
    assert [r[0] for r in poll_sql.claim_order(rows)] == [c, a, b]


def test_sql_binds_parameters() -> None:
    assert "%(limit)s" in poll_sql.CLAIM and "SKIP LOCKED" in poll_sql.CLAIM and "%(lease)s" in poll_sql.CLAIM
    params = poll_sql.mark_params([str(uuid.UUID(int=5))])
    assert params == {"ids": [uuid.UUID(int=5)]}
    assert poll_sql.claim_params("p", 10, 2.5) == {"poller": "p", "limit": 10, "lease": 2.5}
