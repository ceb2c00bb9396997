"""The worker's pure decisions: retry policy, message classification, push or pull, trimming, backfill floor."""

from __future__ import annotations

import random
import uuid

import pytest

from services.consumer import headers, outcomes, processor
from services.consumer.outcomes import Dead, Retry
from services.consumer.retry import RetryPolicy
from services.core import events as ev
from services.core.settings import SettingsError
from services.worker import config as worker_config
from services.worker import policy


def test_failure_before_the_last_attempt_retries_with_the_next_attempt_number_and_bounded_delay() -> None:
    retry = RetryPolicy(max_attempts=5, base=0.5, cap=4.0)
    rand = random.Random(1)
    for attempt in range(1, 5):
        outcome = retry.after_error(attempt, RuntimeError("boom"), rand)
        assert isinstance(outcome, Retry)
        assert outcome.attempt == attempt + 1 and outcome.reason == "RuntimeError: boom"
        assert 1 <= outcome.delay_ms <= min(4000, 500 * 2 ** (attempt - 1))


def test_delay_is_capped_for_late_attempts() -> None:
    retry = RetryPolicy(max_attempts=100, base=1.0, cap=2.0)
    delays = [retry.after_error(40, RuntimeError("x"), random.Random(i)) for i in range(50)]
    assert all(isinstance(d, Retry) and d.delay_ms <= 2000 for d in delays)


def test_the_last_attempt_goes_to_the_dead_queue_with_the_count() -> None:
    assert RetryPolicy(3, 0.1, 1.0).after_error(3, RuntimeError("boom")) == Dead(
        "attempts exhausted: RuntimeError: boom", 3)
    assert isinstance(RetryPolicy(1, 0.1, 1.0).after_error(1, RuntimeError("boom")), Dead)


@pytest.mark.parametrize(("given", "attempt"), [
    (None, 1), ({}, 1), ({headers.ATTEMPT: 3}, 3), ({headers.ATTEMPT: "3"}, 1),
    ({headers.ATTEMPT: 0}, 1), ({headers.ATTEMPT: True}, 1),
])
def test_attempt_is_read_from_the_header_defensively(given: dict[str, object] | None, attempt: int) -> None:
    assert headers.attempt_of(given) == attempt


def test_a_valid_body_classifies_as_its_event() -> None:
    event = ev.Event.new(ev.POST_CREATED, 1, {"post_id": 1, "author_id": 2})
    assert processor.classify(ev.encode(event), 1) == event


@pytest.mark.parametrize(("body", "reason"), [
    (b"{not json", "malformed: body is not JSON"),
    (b'{"id": "%s", "type": "post.exploded", "aggregate_type": "post", "aggregate_id": "1", '
     b'"occurred_at": "2024-01-01T00:00:00Z", "payload": {}}' % str(uuid.uuid4()).encode(),
     "malformed: unknown event type 'post.exploded'"),
    (b"[]", "malformed: body must be a JSON object"),
    (ev.encode(ev.Event.new(ev.DELIVERY_WEBHOOK, 1, {"delivery_id": 1})),
     "malformed: delivery.webhook is not a fan-out event"),
])
def test_unparseable_or_unknown_messages_are_dead_at_once(body: bytes, reason: str) -> None:
    outcome = processor.classify(body, 2)
    assert isinstance(outcome, Dead) and outcome.reason.startswith(reason) and outcome.attempts == 2


def test_a_republished_copy_drops_the_brokers_dead_letter_history() -> None:
    original = {"x-death": [{"queue": "q"}], "x-first-death-queue": "q", "custom": 1, headers.ATTEMPT: 2}
    assert headers.copy_headers(original, **{headers.ATTEMPT: 3}) == {"custom": 1, headers.ATTEMPT: 3}


def test_authors_below_the_threshold_are_pushed_at_or_above_pulled() -> None:
    assert policy.push(9_999, 10_000) is True
    assert policy.push(10_000, 10_000) is False
    assert policy.push(0, 1) is True


def test_trim_checks_one_post_in_trim_every() -> None:
    assert sum(policy.should_trim(p) for p in range(1, 10 * policy.TRIM_EVERY + 1)) == 10


def test_floor_is_raised_only_when_older_posts_exist_than_backfilled() -> None:
    assert policy.backfill_floor(found=201, smallest=50, limit=200) == 50
    assert policy.backfill_floor(found=200, smallest=50, limit=200) is None
    assert policy.backfill_floor(found=0, smallest=None, limit=200) is None


def test_reason_text_is_bounded() -> None:
    assert len(outcomes.reason_text(ValueError("x" * 2000))) == 500


def test_worker_settings_defaults_and_errors_name_the_variable() -> None:
    s = worker_config.from_env({})
    assert (s.concurrency, s.batch_size, s.large_concurrency, s.prefetch, s.max_attempts, s.metrics_port) == (
        2, 500, 1, 1500, 8, 9102)
    with pytest.raises(SettingsError, match="WALFEED_WORKER_BATCH_SIZE"):
        worker_config.from_env({"WALFEED_WORKER_BATCH_SIZE": "0"})
    with pytest.raises(SettingsError, match="WALFEED_WORKER_PREFETCH"):
        worker_config.from_env({"WALFEED_WORKER_CONCURRENCY": "4", "WALFEED_WORKER_PREFETCH": "2"})
    with pytest.raises(SettingsError, match="WALFEED_WORKER_RETRY_CAP"):
        worker_config.from_env({"WALFEED_WORKER_RETRY_BASE": "5", "WALFEED_WORKER_RETRY_CAP": "1"})
    with pytest.raises(SettingsError, match="WALFEED_WORKER_MAX_ATTEMPTS"):
        worker_config.from_env({"WALFEED_WORKER_MAX_ATTEMPTS": "0"})
