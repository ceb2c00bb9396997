"""The relay's loop without Postgres or RabbitMQ (testing.py's in-memory stream and publisher, virtual time): reads
at most READ_AHEAD windows ahead of the broker's confirms, confirms to Postgres only commit positions whose events
were all confirmed, resumes from a new session without counting the old one's confirmations, and drains on stop."""

from __future__ import annotations

from collections.abc import Callable

import psycopg2
import pytest

from services.cdc_relay.config import RelaySettings
from services.cdc_relay.messages import GROUPED, SINGLE
from services.cdc_relay.relay import READ_AHEAD, READ_BATCH, TICK, Relay
from services.cdc_relay.routes import COPIES_MAX
from services.cdc_relay.sessions import SESSION_SEQ_BITS, Token
from services.cdc_relay.stream import Interrupted, SlotBusy, SlotMissing
from services.core.events import DELIVERY_WEBHOOK, POST_CREATED
from testkit.relay import InMemoryStream, ManualLoop, StreamOpener, StubPublisher, transaction

WINDOW = 8


def alone(events: int, next_lsn: int) -> list[bytes]:
    """A transaction of `events` delivery events: one message each, to the events exchange (routes.py)."""
    return transaction(events, next_lsn, DELIVERY_WEBHOOK)


def fanout(events: int, next_lsn: int) -> list[bytes]:
    """A transaction of `events` post.created events: two messages each, alone and for walfeed's consumers."""
    return transaction(events, next_lsn, POST_CREATED)


class Harness:
    """A relay on `loop` whose stream opener hands out `sessions` in turn, with a StubPublisher."""

    def __init__(self, loop: ManualLoop, *sessions: InMemoryStream | BaseException, window: int = WINDOW,
                 group_max: int = 1, **settings: float) -> None:
        self.opener = StreamOpener()
        for session in sessions:
            self.opener.then(session)
        self.publishers: list[StubPublisher] = []

        def make_publisher(on_confirmed: Callable[[list[Token]], None],
                           is_current: Callable[[Token], bool]) -> StubPublisher:
            self.publishers.append(StubPublisher(on_confirmed, is_current))
            return self.publishers[-1]

        cfg = RelaySettings(window=window, group_max=group_max, status_interval=settings.get("status_interval", 10.0),
                            shutdown_timeout=settings.get("shutdown_timeout", 10.0), standby_interval=2.0)
        self.relay = Relay(cfg, "slot", loop, self.opener, make_publisher, clock=loop.time)

    @property
    def publisher(self) -> StubPublisher:
        return self.publishers[0]


@pytest.fixture
def loop() -> ManualLoop:
    return ManualLoop()


def test_reads_at_most_read_ahead_windows_then_a_quarter_window_confirmed_reads_again(loop: ManualLoop) -> None:
    stream = InMemoryStream(loop, start_lsn=100)
    h = Harness(loop, stream)
    h.relay.start()
    stream.send(fanout(5 * WINDOW, next_lsn=200))  # two messages each (routes.py): the limit counts them
    loop.run_for(1.0)
    limit = READ_AHEAD * WINDOW * COPIES_MAX  # READ_AHEAD windows of fan-out events
    quarter = WINDOW * COPIES_MAX // 4
    assert len(h.publisher.submitted) == limit and not loop.watching(stream.fileno())
    h.publisher.confirm(quarter - 1)
    loop.run_for(1.0)
    assert len(h.publisher.submitted) == limit  # less than a quarter window confirmed: still waiting
    h.publisher.confirm(1)
    loop.run_for(1.0)
    assert len(h.publisher.submitted) == limit + quarter and not loop.watching(stream.fileno())
    while h.publisher.held:
        h.publisher.confirm()
        loop.run_for(1.0)
    assert len(h.publisher.submitted) == 5 * WINDOW * COPIES_MAX and stream.buffered == 0
    assert stream.feedbacks[-1] == 200 and loop.watching(stream.fileno())


def test_messages_buffered_past_one_read_batch_are_read_without_another_socket_event(loop: ManualLoop) -> None:
    stream = InMemoryStream(loop)
    h = Harness(loop, stream, window=1000)
    h.relay.start()
    stream.send(alone(READ_BATCH * 2, next_lsn=200))  # one socket event: libpq buffers the rest
    loop.run_for(1.0)
    assert len(h.publisher.submitted) == READ_BATCH * 2


def test_confirms_a_commit_position_only_once_every_event_up_to_it_is_confirmed(loop: ManualLoop) -> None:
    stream = InMemoryStream(loop, start_lsn=100)
    h = Harness(loop, stream)
    h.relay.start()
    stream.send(alone(2, next_lsn=200) + alone(3, next_lsn=300) + alone(0, next_lsn=400))
    loop.run_for(1.0)
    assert stream.feedbacks == []  # nothing confirmed, and the status interval has not passed
    h.publisher.confirm(1)
    loop.run_for(1.0)
    assert stream.feedbacks == []
    h.publisher.confirm(2)
    loop.run_for(1.0)
    assert stream.feedbacks == [200]
    h.publisher.confirm()
    loop.run_for(1.0)
    assert stream.feedbacks == [200, 400]  # the empty transaction after the last events with them
    loop.run_for(10.0)
    assert stream.feedbacks[-1] == 400  # the status interval: the same position again, never an older one


def test_a_delivery_event_is_one_message_whose_token_is_its_number(loop: ManualLoop) -> None:
    stream = InMemoryStream(loop, start_lsn=100)
    h = Harness(loop, stream)
    h.relay.start()
    stream.send(alone(5, next_lsn=200))
    loop.run_for(1.0)
    assert [m.token for m in h.publisher.submitted] == [0, 1, 2, 3, 4]
    assert all(m.traceparents is None for m in h.publisher.submitted)


def test_a_fanout_event_is_two_messages_and_its_position_waits_for_both(loop: ManualLoop) -> None:
    stream = InMemoryStream(loop, start_lsn=100)
    h = Harness(loop, stream)
    h.relay.start()
    stream.send(fanout(3, next_lsn=200))
    loop.run_for(1.0)
    # Walfeed's copies first (numbers s + 1, the grouped exchange), then each alone (s, the events exchange).
    assert [(m.token, m.route) for m in h.publisher.submitted] == [
        (1, GROUPED), (3, GROUPED), (5, GROUPED), (0, SINGLE), (2, SINGLE), (4, SINGLE)]
    assert [m.message_id for m in h.publisher.submitted[:3]] == [m.message_id for m in h.publisher.submitted[3:]]
    h.publisher.confirm(5)
    loop.run_for(1.0)
    assert stream.feedbacks == []  # the last event's single copy is not confirmed yet
    h.publisher.confirm()
    loop.run_for(1.0)
    assert stream.feedbacks == [200]


def test_a_group_is_one_message_and_its_confirm_confirms_each_of_its_events(loop: ManualLoop) -> None:
    stream = InMemoryStream(loop, start_lsn=100)
    h = Harness(loop, stream, window=16, group_max=4)
    h.relay.start()
    # A group spans the two transactions: its confirm completes the first and part of the second.
    stream.send(fanout(3, next_lsn=150) + fanout(6, next_lsn=200))
    loop.run_for(1.0)
    assert [m.token for m in h.publisher.submitted] == [range(1, 9, 2), range(9, 17, 2), 17, *range(0, 18, 2)]
    assert [m.route for m in h.publisher.submitted] == [GROUPED] * 3 + [SINGLE] * 9
    h.publisher.confirm(3)
    loop.run_for(1.0)
    assert stream.feedbacks == []  # every group confirmed, no single copy yet
    h.publisher.confirm(3)
    loop.run_for(1.0)
    assert stream.feedbacks == [150]
    h.publisher.confirm(5)
    loop.run_for(1.0)
    assert stream.feedbacks == [150]  # the second transaction's last single copy is not confirmed yet
    h.publisher.confirm()
    loop.run_for(1.0)
    assert stream.feedbacks == [150, 200]


def test_a_new_session_ignores_the_confirmations_of_the_old_sessions_groups(loop: ManualLoop) -> None:
    first, second = InMemoryStream(loop, start_lsn=100), InMemoryStream(loop, start_lsn=150)
    h = Harness(loop, first, second, group_max=4)
    h.relay.start()
    first.send(fanout(3, next_lsn=150) + fanout(3, next_lsn=200))
    loop.run_for(1.0)
    old = list(h.publisher.held)
    first.fail(psycopg2.OperationalError("server closed the connection unexpectedly"))
    loop.run_for(1.0)
    assert h.publisher.held == []  # the old session's groups are stale: Postgres sends their events again
    h.publisher.on_confirmed([m.token for m in old])  # they were in flight: their confirmations come anyway
    second.send(fanout(5, next_lsn=200))
    loop.run_for(1.0)
    s = 1 << SESSION_SEQ_BITS
    assert [m.token for m in h.publisher.held] == [range(s + 1, s + 9, 2), s + 9, *range(s, s + 10, 2)]
    h.publisher.confirm()
    loop.run_for(1.0)
    assert second.feedbacks == [200]


def test_an_idle_stream_confirms_the_server_position(loop: ManualLoop) -> None:
    stream = InMemoryStream(loop, start_lsn=100)
    h = Harness(loop, stream)
    h.relay.start()
    stream.send([], wal_end=500)  # a keepalive: only other tables were written
    loop.run_for(2 * TICK)
    assert stream.feedbacks == [500]


def test_a_new_session_resumes_from_its_own_start_and_ignores_the_old_sessions_confirmations(
        loop: ManualLoop) -> None:
    first, second = InMemoryStream(loop, start_lsn=100), InMemoryStream(loop, start_lsn=150)
    h = Harness(loop, first, second)
    h.relay.start()
    first.send(alone(3, next_lsn=150) + alone(3, next_lsn=200))
    loop.run_for(1.0)
    h.publisher.confirm(3)
    loop.run_for(1.0)
    assert first.feedbacks == [150]
    old = list(h.publisher.held)
    first.fail(psycopg2.OperationalError("server closed the connection unexpectedly"))
    loop.run_for(1.0)  # the first reconnect's backoff: at most 0.5 s
    assert first.closed and h.opener.opened == [first, second]
    assert h.publisher.held == []  # the old session's events are stale: Postgres sends them again
    h.publisher.on_confirmed([m.token for m in old])  # they were in flight: their confirmations come anyway
    second.send(alone(3, next_lsn=200))
    loop.run_for(1.0)
    h.publisher.confirm()
    loop.run_for(1.0)
    assert second.feedbacks == [200]


def test_stop_waits_for_outstanding_confirms_then_sends_the_final_position(loop: ManualLoop) -> None:
    stream = InMemoryStream(loop, start_lsn=100)
    h = Harness(loop, stream)
    h.relay.start()
    stream.send(alone(4, next_lsn=200))
    loop.run_for(1.0)
    h.relay.request_stop()
    stream.send(alone(4, next_lsn=300))
    loop.run_for(1.0)
    assert not loop.stopped and len(h.publisher.submitted) == 4  # nothing more read while stopping
    h.publisher.confirm()
    loop.run_for(1.0)
    assert loop.stopped and h.publisher.stopped and stream.closed
    assert stream.feedbacks == [200] and h.relay.exit_status == 0


def test_stop_gives_up_on_confirms_after_the_shutdown_timeout(loop: ManualLoop) -> None:
    stream = InMemoryStream(loop, start_lsn=100)
    h = Harness(loop, stream, shutdown_timeout=3.0)
    h.relay.start()
    stream.send(alone(2, next_lsn=150) + alone(4, next_lsn=200))
    loop.run_for(1.0)
    h.publisher.confirm(2)
    h.relay.request_stop()
    loop.run_for(2.5)
    assert not loop.stopped
    loop.run_for(1.0)
    assert loop.stopped and stream.feedbacks[-1] == 150  # never past the unconfirmed events


def test_a_missing_slot_stops_with_status_1(loop: ManualLoop) -> None:
    assert Harness(loop, SlotMissing("slot")).relay.run() == 1


def test_a_recovery_interrupted_by_a_stop_is_not_tried_again_and_the_stop_completes(loop: ManualLoop) -> None:
    stream = InMemoryStream(loop)
    h = Harness(loop, Interrupted("stop requested while republishing"), stream)
    h.relay.start()
    h.relay.request_stop()  # the signal handler: queued on the loop while the recovery blocked it
    loop.run_for(5.0)
    assert loop.stopped and h.relay.exit_status == 0 and h.opener.opened == []


def test_an_unreachable_database_and_a_busy_slot_are_tried_again(loop: ManualLoop) -> None:
    stream = InMemoryStream(loop)
    h = Harness(loop, psycopg2.OperationalError("refused"), SlotBusy("active for PID 7"), stream)
    h.relay.start()
    loop.run_for(15.0)
    assert h.opener.opened == [stream] and not loop.stopped
