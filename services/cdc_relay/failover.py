"""Before the relay streams: recognise a new primary and republish what its slot never saw (docs/adr/0091).

Each time the relay opens its stream, `Recovery.prepare` reads the server's identity (IDENTIFY_SYSTEM), the slot
and the checkpoint (db/init/013_relay_checkpoint.sql) and asks failover_policy.decide what to do. On a new
primary, under a session advisory lock (one relay recovers, the others wait as standbys):

1. create the slot with an exported snapshot (CREATE: the slot was missing) and import that snapshot into a
   REPEATABLE READ transaction: a row committed before the slot's start is visible in it, a row committed after
   is the slot's, none is both; or, with a slot of unknown history (REPUBLISH), a new snapshot taken after it:
   the rows committed between the slot's start and that snapshot are both republished and streamed (twice at most);
2. in that transaction, republish every outbox row the checkpoint does not cover (walfeed_relay_unconfirmed), in
   batches of the relay's window, each confirmed by the broker before the next, routed as the polling source routes
   them (routes.poll: a fan-out event alone to the events exchange and to the grouped exchange, which walfeed's own
   consumers read: docs/adr/0115);
3. commit, then make that snapshot's xmin the checkpoint, on this server and timeline; the relay then streams.

Interrupted anywhere, nothing is checkpointed: the next start finds the slot and the old checkpoint and
republishes again (duplicates, never loss). psycopg2 here as in stream.py: the slot and its snapshot are created
on a replication connection, and the republish runs on a plain psycopg2 connection so its errors are the
ReplicationError the relay already retries on.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import time
from collections.abc import Callable
from typing import Any, Final

import psycopg2
import psycopg2.extensions
import psycopg2.extras
from prometheus_client import Counter
from psycopg2 import sql

from services.cdc_relay import metrics, poll_sql, routes
from services.cdc_relay.failover_policy import Action, Checkpoint, Server, decide
from services.cdc_relay.messages import Outgoing, outgoing
from services.cdc_relay.poll_policy import Claims
from services.cdc_relay.publisher_thread import PublisherThread
from services.cdc_relay.stream import Interrupted, SlotBusy, SlotMissing
from services.core import slots, tracing
from services.core.topology import Topology

log = logging.getLogger(__name__)

RECOVERIES = Counter("walfeed_relay_failovers_total", "New primaries recovered from (slot created or republished)",
                     ["action"])

READ_CHECKPOINT: Final = "SELECT system_identifier, timeline, recovering FROM relay_checkpoints WHERE slot = %s"
LOCK: Final = "SELECT pg_try_advisory_lock(hashtext('walfeed.failover'), hashtext(%s))"
CREATE_SLOT: Final = "CREATE_REPLICATION_SLOT {} LOGICAL {} (SNAPSHOT 'export')"
UNCONFIRMED: Final = "SELECT * FROM walfeed_relay_unconfirmed(%s)"
RESET: Final = "SELECT walfeed_relay_checkpoint_reset(%s, %s::xid8, %s::pg_lsn)"
FORGET: Final = "SELECT walfeed_relay_checkpoint_forget(%s)"
SNAPSHOT_XMIN: Final = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text"
WAIT_STEP: Final = 0.2  # seconds between two looks at a stop request while waiting for confirms


class Republisher:
    """Publishes batches of outbox rows on a publisher thread of its own and waits for the broker's confirms."""

    def __init__(self, amqp_url: str, topology: Topology, window: int, blocked_timeout: float,
                 traces: tracing.Tracing = tracing.DISABLED) -> None:
        self._confirmed: queue.SimpleQueue[list[str]] = queue.SimpleQueue()
        self._thread: PublisherThread[str] = PublisherThread(amqp_url, topology, self._confirmed.put, window,
                                                            blocked_timeout=blocked_timeout, traces=traces)
        self._thread.start()

    def publish(self, batch: list[Outgoing[str]], should_stop: Callable[[], bool]) -> None:
        """Returns once the broker confirmed every message of `batch`; raises Interrupted on a stop request. The
        messages' tokens are event ids, and both copies of a fan-out event carry its id: counted, not a set."""
        waiting = Claims()
        waiting.claimed(m.token for m in batch)
        self._thread.submit(batch)
        while waiting.in_flight:
            if should_stop():
                raise Interrupted("stop requested while republishing")
            with contextlib.suppress(queue.Empty):
                waiting.confirmed(self._confirmed.get(timeout=WAIT_STEP))

    def close(self) -> None:
        self._thread.stop()
        self._thread.join(5.0)


MakeRepublisher = Callable[[], Republisher]


class Recovery:
    def __init__(self, database_url: str, slot: str, batch: int, make_republisher: MakeRepublisher,
                 should_stop: Callable[[], bool] = lambda: False) -> None:
        self._url, self._slot, self._batch = database_url, slot, batch
        self._make_republisher, self._should_stop = make_republisher, should_stop

    def prepare(self) -> None:
        """Makes the slot safe to stream. Raises SlotMissing (nothing to recover from), SlotBusy (another relay is
        recovering), Interrupted, or a psycopg2.Error (the relay retries with backoff)."""
        repl = psycopg2.connect(self._url, connection_factory=psycopg2.extras.LogicalReplicationConnection,
                                connect_timeout=5, application_name="walfeed-relay")
        try:
            if self._action(repl.cursor()) is Action.STREAM:
                return
            self._recover(repl)
        finally:
            repl.close()

    def _action(self, cur: Any, loud: bool = False) -> Action:
        cur.execute("IDENTIFY_SYSTEM")
        identity = cur.fetchone()
        server = Server(int(identity[0]), int(identity[1]))
        found = slots.find(cur, self._slot)
        cur.execute(READ_CHECKPOINT, (self._slot,))
        row = cur.fetchone()
        checkpoint = None if row is None else Checkpoint(None if row[0] is None else Server(int(row[0]), int(row[1])),
                                                         bool(row[2]))
        action = decide(server, found is not None, checkpoint)
        if action is Action.MISSING:
            raise SlotMissing(self._slot)
        if loud and action is not Action.STREAM:
            recorded = checkpoint.server if checkpoint is not None else None
            log.warning("new primary: the slot has not seen every event the checkpoint does not cover",
                        extra={"slot": self._slot, "action": action.value, "timeline": server.timeline,
                               "checkpoint_timeline": recorded.timeline if recorded else None})
        return action

    def _recover(self, repl: Any) -> None:
        tx = psycopg2.connect(self._url, connect_timeout=5, application_name="walfeed-relay-recovery")
        try:
            tx.autocommit = True
            with tx.cursor() as cur:
                cur.execute(LOCK, (self._slot,))
                locked = cur.fetchone()
            if not locked or not locked[0]:
                raise SlotBusy("another relay is recovering the slot on this new primary")
            action = self._action(repl.cursor(), loud=True)  # again, under the lock: another may have finished
            if action is Action.STREAM:
                return
            if action is Action.CREATE:
                with tx.cursor() as cur:
                    cur.execute(FORGET, (self._slot,))
            tx.autocommit = False
            tx.set_session(isolation_level=psycopg2.extensions.ISOLATION_LEVEL_REPEATABLE_READ)
            start = self._create_slot(repl, tx) if action is Action.CREATE else self._slot_start(tx)
            with tx.cursor() as cur:
                cur.execute(SNAPSHOT_XMIN)
                xmin = cur.fetchone()[0]
            count = self._republish(tx)
            tx.commit()
            tx.autocommit = True
            with tx.cursor() as cur:
                cur.execute(RESET, (self._slot, xmin, start))
            RECOVERIES.labels(action.value).inc()
            log.warning("recovered on a new primary: republished what the checkpoint did not cover",
                        extra={"slot": self._slot, "action": action.value, "republished": count, "lsn": start})
        finally:
            tx.close()

    def _create_slot(self, repl: Any, tx: Any) -> str:
        """Creates the slot, imports its snapshot into `tx`'s transaction; returns the slot's start."""
        cur = repl.cursor()
        cur.execute(sql.SQL(CREATE_SLOT).format(sql.Identifier(self._slot), sql.Identifier(slots.OUTPUT_PLUGIN)))
        _name, start, snapshot, _plugin = cur.fetchone()
        with tx.cursor() as tcur:
            tcur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot,))  # first statement of the transaction
        repl.close()  # imported: the snapshot lives on in `tx`; no idle walsender while republishing
        log.info("created replication slot", extra={"slot": self._slot, "lsn": start})
        return str(start)

    def _slot_start(self, tx: Any) -> str:
        """The existing slot's position, read in `tx`'s transaction (its snapshot is taken by this statement)."""
        with tx.cursor() as cur:
            found = slots.find(cur, self._slot)
        if found is None or found.confirmed_flush_lsn is None:
            raise SlotMissing(self._slot)
        return found.confirmed_flush_lsn

    def _republish(self, tx: Any) -> int:
        started, count = time.monotonic(), 0
        republisher = self._make_republisher()
        try:
            with tx.cursor(name="walfeed_republish") as cur:
                cur.itersize = self._batch
                cur.execute(UNCONFIRMED, (self._slot,))
                while rows := cur.fetchmany(self._batch):
                    events = []
                    for row in rows:
                        event = poll_sql.row_event(row)
                        events.append(outgoing(event, str(event.id), poll_sql.row_traceparent(row)))
                    messages = routes.poll(events)
                    republisher.publish(messages, self._should_stop)
                    count += len(events)
                    metrics.REPUBLISHED.labels("failover").inc(len(messages))  # every copy (docs/adr/0115)
                    log.info("republished", extra={"count": count,
                                                   "seconds": round(time.monotonic() - started, 2)})
        finally:
            republisher.close()
        return count

