"""What the publisher holds: every message published until confirmed, once, never more than a window unconfirmed,
stale ones never published again, first publish times kept through failures, nothing kept once confirmed."""

from __future__ import annotations

from collections import Counter

from hypothesis import example, given, settings
from hypothesis import strategies as st

from services.cdc_relay.messages import Outgoing
from services.cdc_relay.publisher_state import RETRY_BASE, RETRY_CAP, PublisherState

WINDOW = 4


def message(token: int) -> Outgoing[int]:
    return Outgoing(token, b"{}", f"m{token}", "t", 0)


def test_a_window_at_a_time_then_acks_make_room() -> None:
    state: PublisherState[int] = PublisherState(window=2)
    state.submit(message(t) for t in range(3))
    assert [m.token for m in state.to_publish(now=1.0)] == [0, 1]
    assert state.to_publish(now=1.0) == [] and state.unconfirmed == 2 and state.waiting == 1
    settled = state.acked(2, multiple=True)
    assert settled.tokens == [0, 1] and settled.first_sent == [1.0, 1.0] and not settled.failed
    assert [m.token for m in state.to_publish(now=2.0)] == [2]


def test_a_failed_message_waits_its_backoff_and_keeps_its_first_publish_time() -> None:
    state: PublisherState[int] = PublisherState(window=2)
    state.submit([message(0)])
    state.to_publish(now=1.0)
    state.returned("m0")
    settled = state.acked(1, multiple=False)
    assert settled.tokens == [] and state.retry(settled.failed, now=2.0) == 1
    due = state.next_due
    assert due is not None and 2.0 <= due <= 2.0 + RETRY_CAP
    state.due(due)
    assert [m.token for m in state.to_publish(now=9.0)] == [0] and state.next_due is None
    assert state.acked(2, multiple=False).first_sent == [1.0]  # the same channel: tag 2


def test_a_lost_channel_publishes_the_unconfirmed_again_first_oldest_first() -> None:
    state: PublisherState[int] = PublisherState(window=2)
    state.submit(message(t) for t in range(3))
    state.to_publish(now=0.0)
    assert state.channel_lost() == 2  # the two in flight, counted as republished; the third was never sent
    assert [m.token for m in state.to_publish(now=1.0)] == [0, 1]


def test_stale_messages_are_dropped_waiting_and_when_they_fail() -> None:
    floor = [0]
    state: PublisherState[int] = PublisherState(window=2, is_current=lambda token: token >= floor[0])
    state.submit(message(t) for t in range(4))
    state.to_publish(now=0.0)
    floor[0] = 4
    state.drop_stale()
    assert state.waiting == 0 and state.unconfirmed == 2  # in flight: dropped when they fail
    assert state.retry(state.nacked(2, multiple=True, now=0.0).failed, now=0.0) == 0
    assert state.unconfirmed == state.waiting == 0 and state.next_due == RETRY_BASE  # only the next probe waits


def test_after_a_nack_nothing_more_goes_out_but_one_probe_until_the_broker_acks_again() -> None:
    state: PublisherState[int] = PublisherState(window=4)
    state.submit(message(t) for t in range(8))
    assert [m.token for m in state.to_publish(now=0.0)] == [0, 1, 2, 3]
    state.retry(state.nacked(4, multiple=True, now=0.0).failed, now=0.0)
    assert state.probing and state.to_publish(now=0.1) == []  # 4-7 are held, not sent to be nacked too
    assert state.next_due is not None and state.next_due <= RETRY_BASE
    state.due(RETRY_BASE)
    (probe,) = state.to_publish(now=RETRY_BASE)
    assert probe.token == 4 and state.to_publish(now=RETRY_BASE) == []  # one in flight
    state.retry(state.nacked(5, multiple=False, now=RETRY_BASE).failed, now=RETRY_BASE)  # the probe nacked
    state.due(RETRY_BASE * 2.5)
    assert state.to_publish(now=RETRY_BASE * 2.5) == []  # its wait doubled
    state.due(RETRY_BASE * 3)
    (probe,) = state.to_publish(now=RETRY_BASE * 3)
    state.acked(6, multiple=False)
    assert not state.probing and len(state.to_publish(now=1.0)) == 4  # the whole window again


def group(seqs: range) -> Outgoing[range]:
    """A group's message (grouping.py): its token the range of its events' sequence numbers."""
    return Outgoing(seqs, b"[]", f"m{seqs.start}", "t", 0, None, ("",) * len(seqs))


def test_a_group_is_one_message_of_the_window_and_its_confirm_counts_its_events() -> None:
    state: PublisherState[int | range] = PublisherState(window=2)
    state.submit([group(range(0, 10)), message(10), group(range(11, 14))])
    assert [m.token for m in state.to_publish(now=1.0)] == [range(0, 10), 10]  # the window counts messages
    settled = state.acked(2, multiple=True)
    assert settled.tokens == [range(0, 10), 10] and settled.events == 11
    state.to_publish(now=2.0)
    assert state.acked(3, multiple=False).events == 3


def test_a_nacked_group_is_published_again_whole() -> None:
    state: PublisherState[int | range] = PublisherState(window=2)
    state.submit([group(range(0, 5))])
    state.to_publish(now=0.0)
    settled = state.nacked(1, multiple=False, now=0.0)
    assert settled.events == 0 and state.retry(settled.failed, now=0.0) == 5  # events published again
    state.due(RETRY_CAP)
    (again,) = state.to_publish(now=RETRY_CAP)
    assert again == group(range(0, 5))
    assert state.acked(2, multiple=False).tokens == [range(0, 5)]


def test_a_returned_group_and_the_groups_unconfirmed_on_a_lost_channel_go_again_whole_counted_in_events() -> None:
    state: PublisherState[int | range] = PublisherState(window=3)
    state.submit([group(range(0, 4)), message(4), group(range(5, 7))])
    state.to_publish(now=0.0)
    state.returned("m0")
    settled = state.acked(1, multiple=False)  # the return came before its ack: it failed
    assert settled.tokens == [] and state.retry(settled.failed, now=0.0) == 4
    assert state.channel_lost() == 3  # message 4 and the group of 2: first again, oldest first
    assert [m.token for m in state.to_publish(now=0.0)] == [4, range(5, 7)]


def test_a_lost_channel_ends_probing() -> None:
    state: PublisherState[int] = PublisherState(window=2)
    state.submit(message(t) for t in range(4))
    state.to_publish(now=0.0)
    state.retry(state.nacked(1, multiple=False, now=0.0).failed, now=0.0)
    assert state.probing
    state.channel_lost()
    assert not state.probing and len(state.to_publish(now=0.0)) == 2


actions = st.one_of(
    st.tuples(st.just("submit"), st.integers(1, 6)),
    st.tuples(st.sampled_from(["publish", "lost", "end", "tick"]), st.just(0)),
    st.tuples(st.sampled_from(["ack", "ack*", "nack", "nack*", "return"]), st.integers(0, 20)),
)


@given(st.lists(actions, max_size=80))
@example([("submit", 3), ("publish", 0), ("return", 0), ("end", 0), ("ack*", 3), ("submit", 1), ("publish", 0)])
@example([("submit", 6), ("publish", 0), ("nack", 1), ("lost", 0), ("publish", 0), ("ack*", 4)])
@settings(max_examples=300)
def test_every_current_message_is_confirmed_once_and_nothing_else_is_kept(steps: list[tuple[str, int]]) -> None:
    """Any interleaving of submits, publishes, acks and nacks (single or `multiple`), returns, lost channels, time
    passing and replication sessions ending, checked step by step against a model that knows only where each message
    is (waiting, or unconfirmed under its tag); then everything acked until nothing is held."""
    floor = [0]  # tokens below it are of a session that ended
    state: PublisherState[int] = PublisherState(WINDOW, is_current=lambda token: token >= floor[0])
    waiting: set[int] = set()
    unconfirmed: dict[int, int] = {}  # tag -> token
    first_sent: dict[int, float] = {}
    confirmed: Counter[int] = Counter()
    next_token, next_tag, now = 0, 1, 0.0

    def settle(tag: int, multiple: bool, ack: bool) -> None:
        tags = [t for t in sorted(unconfirmed) if t <= tag] if multiple else [tag] * (tag in unconfirmed)
        settled = [unconfirmed.pop(t) for t in tags]
        outcome = state.acked(tag, multiple) if ack else state.nacked(tag, multiple, now)
        failed = [m.token for m, _ in outcome.failed]
        assert sorted(outcome.tokens + failed) == sorted(settled)
        assert outcome.first_sent == [first_sent[t] for t in outcome.tokens]
        confirmed.update(outcome.tokens)
        again = [t for t in failed if t >= floor[0]]
        assert state.retry(outcome.failed, now) == len(again)
        waiting.update(again)

    def publish() -> None:
        nonlocal next_tag
        batch = [m.token for m in state.to_publish(now)]
        assert set(batch) <= waiting and all(t >= floor[0] for t in batch)  # stale ones never again
        for token in batch:
            waiting.discard(token)
            first_sent.setdefault(token, now)
            unconfirmed[next_tag] = token
            next_tag += 1

    for action, n in steps:
        if action == "submit":
            state.submit(message(t) for t in range(next_token, next_token + n))
            waiting.update(range(next_token, next_token + n))
            next_token += n
        elif action == "publish":
            publish()
        elif action == "lost":
            state.channel_lost()
            waiting.update(t for t in unconfirmed.values() if t >= floor[0])
            unconfirmed.clear()
            next_tag = 1
        elif action == "end":
            floor[0] = next_token
            state.drop_stale()
            waiting.clear()
        elif action == "tick":
            now += 1.0
            state.due(now)
        elif action == "return":
            if unconfirmed:
                state.returned(f"m{unconfirmed[sorted(unconfirmed)[n % len(unconfirmed)]]}")
        else:
            settle(n % next_tag, action.endswith("*"), action.startswith("ack"))
        assert state.unconfirmed == len(unconfirmed) <= WINDOW
        assert state.waiting == len(waiting)
        due = state.next_due
        assert due is None or due <= now + RETRY_CAP
    for _ in range(1000):  # a return still expected fails its message once more: a round each
        if not (state.unconfirmed or state.waiting):
            break
        now += RETRY_CAP
        state.due(now)
        publish()
        settle(next_tag - 1, multiple=True, ack=True)
    assert state.unconfirmed == state.waiting == 0
    assert all(count == 1 for count in confirmed.values())
    assert set(range(floor[0], next_token)) <= set(confirmed)
    assert not state._tries and not state._first_sent  # nothing kept of a message once it is settled
