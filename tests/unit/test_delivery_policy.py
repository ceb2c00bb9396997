"""The delivery worker's pure decisions (services/delivery/policy.py, route.py)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.consumer import acks, headers
from services.core.topology import DELIVERY_RETRY_DELAYS_MS
from services.delivery import budget, policy, route
from services.delivery.payload import Delivery
from services.delivery.policy import DEAD, DELIVERED, RETRYING, Answer, NoAnswer, Refused

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
PRODUCTION = policy.Settings(max_attempts=12, base=30.0, cap=1800.0, retry_after_max=86_400.0,
                             disable_after=432_000.0)


@given(st.integers(min_value=1, max_value=200), st.integers(min_value=0, max_value=2**32))
def test_backoff_doubles_from_30_s_to_30_min_less_at_most_a_fifth(attempt: int, seed: int) -> None:
    delay = policy.backoff(attempt, 30.0, 1800.0, random.Random(seed))
    ceiling = min(1800.0, 30.0 * 2 ** (attempt - 1))
    assert 0.8 * ceiling <= delay <= ceiling


@pytest.mark.parametrize(("attempt", "ceiling"), [(1, 30), (2, 60), (3, 120), (4, 240), (7, 1800), (11, 1800)])
def test_the_delays_are_30_s_60_s_and_so_on_capped_at_30_min(attempt: int, ceiling: float) -> None:
    decision = policy.decide(Answer(503), attempt, PRODUCTION, NOW)
    assert decision.delay is not None and 0.8 * ceiling <= decision.delay <= ceiling


@pytest.mark.parametrize("code", [408, 425, 429, 500, 502, 503, 504, 599])
def test_retriable_http_answers_retry(code: int) -> None:
    decision = policy.decide(Answer(code), 1, PRODUCTION, NOW)
    assert decision.status == RETRYING and decision.delay is not None and decision.disable is None


@pytest.mark.parametrize("code", [400, 401, 403, 404, 405, 409, 413, 422, 501, 301, 302, 307])
def test_other_answers_are_dead_at_once(code: int) -> None:
    decision = policy.decide(Answer(code), 1, PRODUCTION, NOW)
    assert decision.status == DEAD and decision.disable is None and str(code) in (decision.reason or "")


@given(st.integers(min_value=200, max_value=299))
def test_every_2xx_is_delivered(code: int) -> None:
    assert policy.decide(Answer(code), 5, PRODUCTION, NOW).status == DELIVERED


def test_410_disables_the_webhook_at_once() -> None:
    decision = policy.decide(Answer(410), 1, PRODUCTION, NOW)
    assert decision.status == DEAD and decision.disable is not None and "410" in decision.disable


def test_network_errors_and_timeouts_retry_and_refusals_do_not() -> None:
    assert policy.decide(NoAnswer("timeout"), 1, PRODUCTION, NOW).status == RETRYING
    assert policy.decide(Refused("10.0.0.1 is private"), 1, PRODUCTION, NOW).status == DEAD


@pytest.mark.parametrize(("code", "status"), [(250, DELIVERED), (421, RETRYING), (451, RETRYING), (452, RETRYING),
                                              (550, DEAD), (554, DEAD)])
def test_smtp_4xx_retries_and_5xx_is_dead(code: int, status: str) -> None:
    assert policy.decide(Answer(code, smtp=True), 1, PRODUCTION, NOW).status == status


@given(st.integers(min_value=1, max_value=30))
def test_the_last_attempt_is_dead_with_attempts_exhausted(max_attempts: int) -> None:
    settings = policy.Settings(max_attempts, 1.0, 10.0, 100.0, 1e9)
    assert policy.decide(Answer(503), max_attempts, settings, NOW).status == DEAD
    if max_attempts > 1:
        assert policy.decide(Answer(503), max_attempts - 1, settings, NOW).status == RETRYING
    assert "attempts exhausted" in (policy.decide(NoAnswer("x"), max_attempts, settings, NOW).reason or "")


@given(st.integers(min_value=0, max_value=200_000), st.integers(min_value=1, max_value=11),
       st.integers(min_value=0, max_value=2**32))
def test_retry_after_is_honoured_when_longer_and_capped_at_24_hours(seconds: int, attempt: int, seed: int) -> None:
    backoff = policy.backoff(attempt, PRODUCTION.base, PRODUCTION.cap, random.Random(seed))
    decision = policy.decide(Answer(429, retry_after=str(seconds)), attempt, PRODUCTION, NOW,
                             rand=random.Random(seed))
    assert decision.delay == (backoff if seconds <= backoff else min(seconds, 86_400))


def test_retry_after_as_an_http_date() -> None:
    later = NOW + timedelta(hours=2)
    value = later.strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert policy.parse_retry_after(value, NOW) == 7200.0
    decision = policy.decide(Answer(503, retry_after=value), 1, PRODUCTION, NOW)
    assert decision.delay == 7200.0


@pytest.mark.parametrize("value", [None, "", "soon", "-5", "1.5", "Mon, 99 Foo 2026"])
def test_an_invalid_retry_after_is_ignored(value: str | None) -> None:
    assert policy.parse_retry_after(value, NOW) is None


_HOSTILE_RETRY_AFTER = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=st.characters(categories=["Nd", "No"]), min_size=1, max_size=500),  # "²", "٣", ...
    st.integers(min_value=0, max_value=10**600).map(str),
    st.tuples(st.sampled_from(["Mon", "Tue", "Xyz"]), st.integers(-10**25, 10**25), st.sampled_from(["Jan", "Dec"]),
              st.integers(-10**25, 10**25), st.integers(-99, 10**6), st.sampled_from(["GMT", "+2359", "-2359", ""]))
    .map(lambda p: f"{p[0]}, {p[1]} {p[2]} {p[3]} {p[4]}:00:00 {p[5]}"),
)


@given(_HOSTILE_RETRY_AFTER, st.floats(min_value=0.0, max_value=86_400.0))
def test_any_retry_after_a_receiver_sends_parses_without_raising_within_the_ceiling(value: str, ceiling: float) -> None:
    seconds = policy.parse_retry_after(value, NOW, ceiling)
    assert seconds is None or 0.0 <= seconds <= ceiling


@given(_HOSTILE_RETRY_AFTER, st.integers(min_value=1, max_value=11))
def test_any_retry_after_gives_a_retry_no_later_than_the_longest_honoured(value: str, attempt: int) -> None:
    decision = policy.decide(Answer(503, retry_after=value), attempt, PRODUCTION, NOW)
    assert decision.status == RETRYING and decision.delay is not None
    assert 0.0 < decision.delay <= max(PRODUCTION.cap, PRODUCTION.retry_after_max)


@pytest.mark.parametrize(("value", "seconds"), [
    ("\u00b2", None), ("\u0663", None), ("9" * 400, 86_400.0), ("0" * 300 + "7", 7.0),
    ("Mon, 01 Jan 100000000000000000000 00:00:00 GMT", None), ("Fri, 31 Dec 9999 23:59:59 -2359", 86_400.0)])
def test_retry_after_is_ascii_digits_or_a_date_and_clamped(value: str, seconds: float | None) -> None:
    assert policy.parse_retry_after(value, NOW) == seconds


def test_retry_after_in_each_of_the_three_http_date_forms() -> None:
    """RFC 9110 5.6.7: a recipient accepts all three; only asctime's has no zone, and a zone that is not GMT's is
    not an HTTP-date."""
    later = NOW + timedelta(seconds=97)
    for form in ("%a, %d %b %Y %H:%M:%S GMT", "%A, %d-%b-%y %H:%M:%S GMT", "%a %b %e %H:%M:%S %Y"):
        assert policy.parse_retry_after(later.strftime(form), NOW) == 97.0, form
    assert policy.parse_retry_after(later.strftime("%a, %d %b %Y %H:%M:%S"), NOW) is None
    assert policy.parse_retry_after(later.strftime("%a, %d %b %Y %H:%M:%S -0000"), NOW) is None


def test_a_past_http_date_means_now() -> None:
    assert policy.parse_retry_after("Mon, 01 Jan 2001 00:00:00 GMT", NOW) == 0.0


def test_a_webhook_failing_longer_than_the_span_is_disabled() -> None:
    since = NOW - timedelta(seconds=PRODUCTION.disable_after)
    decision = policy.decide(Answer(503), 1, PRODUCTION, NOW, failing_since=since)
    assert decision.status == DEAD and decision.disable is not None and "failing since" in decision.disable
    recent = policy.decide(Answer(503), 1, PRODUCTION, NOW, failing_since=NOW - timedelta(hours=1))
    assert recent.status == RETRYING and recent.disable is None
    assert policy.decide(Answer(200), 1, PRODUCTION, NOW, failing_since=since).status == DELIVERED


@given(st.binary(max_size=20_000))
def test_an_excerpt_is_at_most_4_kb_of_text_without_nul(body: bytes) -> None:
    text = policy.excerpt(body)
    assert len(text.encode()) <= 4096 and "\x00" not in text


@given(st.integers(min_value=1, max_value=86_400_000 * 2))
def test_a_wait_is_a_chain_of_hops_never_early_and_late_by_less_than_the_shortest(remaining: int) -> None:
    waited, hops = 0, 0
    while (step := route.hop(remaining - waited)) is not None:
        assert step in DELIVERY_RETRY_DELAYS_MS
        waited += step
        hops += 1
    assert remaining <= waited < remaining + DELIVERY_RETRY_DELAYS_MS[0]
    assert hops <= len(DELIVERY_RETRY_DELAYS_MS) + (remaining >> 27)


def test_a_copy_due_now_does_not_hop() -> None:
    assert route.hop(0) is None and route.hop(-5) is None
    assert route.first_hop(0) == DELIVERY_RETRY_DELAYS_MS[0]


def test_headers_keep_ours_and_drop_the_brokers() -> None:
    copied = headers.copy_headers({"x-death": [1], headers.ATTEMPT: 2, "x-first-death-queue": "q"},
                                **{headers.DUE: 5})
    assert copied == {headers.ATTEMPT: 2, headers.DUE: 5}
    assert headers.attempt_of({headers.ATTEMPT: True}) == 1 and headers.attempt_of(None) == 1
    assert route.due_of({headers.DUE: "5"}) == 0


def test_finished_deliveries_are_acked_together_once_the_oldest_is_finished() -> None:
    assert acks.frames([1, 2, 3, 4], {1, 2, 4}, hold=8) == [(2, True)]
    assert acks.frames([3, 4], {4}, hold=8) == []
    assert acks.frames([3, 4], {3, 4}, hold=8) == [(4, True)]


def test_finished_deliveries_held_behind_a_slow_one_are_acked_singly_past_the_hold() -> None:
    assert acks.frames([1, 2, 3, 4], {2, 3, 4}, hold=2) == [(2, False), (3, False), (4, False)]
    assert acks.frames([1, 2, 3], {2, 3}, hold=0) == [(2, False), (3, False)]


@given(st.lists(st.integers(min_value=1, max_value=60), unique=True, max_size=40), st.data())
def test_ack_frames_settle_only_finished_deliveries(tags: list[int], data: st.DataObject) -> None:
    order = sorted(tags)
    done = set(data.draw(st.lists(st.sampled_from(order), unique=True)) if order else [])
    hold = data.draw(st.integers(min_value=0, max_value=10))
    settled: set[int] = set()
    for tag, multiple in acks.frames(order, done, hold):
        settled |= {t for t in order if t <= tag} if multiple else {tag}
    assert settled <= done
    assert len(done - settled) <= hold or settled == done


@given(st.lists(st.sampled_from(["a.example", "b.example", None]), max_size=40),
       st.dictionaries(st.sampled_from(["a.example", "b.example"]), st.integers(min_value=0, max_value=50)),
       st.integers(min_value=1, max_value=20))
def test_a_host_gets_at_most_what_its_window_had_left_and_the_others_wait_past_its_end(
        hosts: list[str | None], before: dict[str, int], limit: int) -> None:
    asked = budget.count(hosts)
    taken = {h: budget.Taken(before.get(h, 0) + n, 10.0) for h, n in asked.items()}
    delays = budget.delays(hosts, taken, limit, 60.0, random.Random(0))
    for host, n in asked.items():
        going = sum(1 for h, d in zip(hosts, delays, strict=True) if h == host and d is None)
        assert going == max(0, min(n, limit - before.get(host, 0)))
    assert all(10.0 <= d <= 10.0 + budget.SPREAD * 60.0 for d in delays if d is not None)
    assert all(d is None for h, d in zip(hosts, delays, strict=True) if h is None)


@pytest.mark.parametrize(("channel", "url", "email", "host"), [
    ("webhook", "https://Hooks.Example.com.:8443/x", None, "hooks.example.com"),
    ("webhook", "https://[::1]/x", None, "::1"), ("webhook", "http://[bad/", None, None),
    ("webhook", "https://[::ffff:5db8:d70e]/x", None, "93.184.215.14"),
    ("webhook", "https://Bücher.example/x", None, "xn--bcher-kva.example"),
    ("email", None, "Bob@Mail.Example.org", "mail.example.org"), ("email", None, None, None)])
def test_the_host_of_a_delivery(channel: str, url: str | None, email: str | None, host: str | None) -> None:
    delivery = Delivery(id=1, channel=channel, status="PENDING", recipient_id=1, created_at=NOW, url=url, email=email)
    assert budget.host_of(delivery) == host
