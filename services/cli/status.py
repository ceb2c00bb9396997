"""`walfeed status`: what an operator looks at first — is the slot keeping up, are queues draining, any dead letters."""

from __future__ import annotations

import contextlib
import logging
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta

import orjson
import pika
import pika.exceptions
import psycopg

from services.core import durations, retention, slots
from services.core.amqp import node_parameters
from services.core.settings import Settings, SettingsError
from services.core.topology import DELIVERY_CHANNELS, DELIVERY_RETRY_DELAYS_MS, Topology
from services.embedder import main as embedder_main


@dataclass(frozen=True)
class SlotStatus:
    name: str
    exists: bool
    active: bool | None = None
    active_pid: int | None = None
    confirmed_flush_lsn: str | None = None
    lag_bytes: int | None = None
    retained_bytes: int | None = None
    wal_status: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class QueueStatus:
    name: str
    messages: int | None
    consumers: int | None
    error: str | None = None


def slot_status(settings: Settings) -> SlotStatus:
    try:
        with psycopg.connect(settings.database_url, connect_timeout=5) as conn:
            slot = slots.find(conn.cursor(), settings.slot)
    except psycopg.Error as exc:
        return SlotStatus(settings.slot, exists=False, error=str(exc).strip())
    if slot is None:
        return SlotStatus(settings.slot, exists=False, error="slot missing: run `walfeed migrate`")
    return SlotStatus(settings.slot, exists=True, active=slot.active, active_pid=slot.active_pid,
                      confirmed_flush_lsn=slot.confirmed_flush_lsn, lag_bytes=slot.lag_bytes,
                      retained_bytes=slot.retained_bytes, wal_status=slot.wal_status)


@dataclass(frozen=True)
class TablesStatus:
    """The outbox and processed_events: rows (the statistics' estimate), bytes, the oldest unpublished row."""

    outbox_rows: int | None = None
    outbox_bytes: int | None = None
    processed_rows: int | None = None
    processed_bytes: int | None = None
    oldest_unpublished: str | None = None  # RFC 3339
    error: str | None = None


def tables_status(settings: Settings) -> TablesStatus:
    try:
        with retention.connect(settings.database_url) as conn:
            found = retention.sizes(conn)
    except psycopg.Error as exc:
        return TablesStatus(error=str(exc).strip())
    oldest = found.oldest_unpublished.isoformat() if found.oldest_unpublished else None
    return TablesStatus(found.outbox_rows, found.outbox_bytes, found.processed_rows, found.processed_bytes, oldest)


def _watched(topology: Topology) -> list[tuple[str, tuple[str, ...], str]]:
    """(shown name, queues summed into it, who declares them) of every line: the fan-out queues, the notifier's,
    then per delivery channel its work queue, its retry queues as one line, its dead queue."""
    lines: list[tuple[str, tuple[str, ...], str]] = [(q, (q,), "start a worker") for q in topology.queues()]
    lines += [(q, (q,), "start `walfeed notifier`") for q in topology.notifier.queues()]
    lines.append((topology.embedder_queue, (topology.embedder_queue,), "start `walfeed embedder`"))
    for channel in DELIVERY_CHANNELS:
        hint = f"start `walfeed deliver --channel {channel}`"
        retries = tuple(topology.delivery_retry_queue(channel, d) for d in DELIVERY_RETRY_DELAYS_MS)
        lines += [(topology.delivery_queue(channel), (topology.delivery_queue(channel),), hint),
                  (f"{topology.delivery_queue(channel)}.retry.*", retries, hint),
                  (topology.delivery_dead_queue(channel), (topology.delivery_dead_queue(channel),), hint)]
    return lines


def queue_status(settings: Settings) -> list[QueueStatus]:
    watched = _watched(Topology(settings.amqp_prefix))
    try:
        conn = pika.BlockingConnection(node_parameters(settings.amqp_url, name="walfeed-status"))
    except pika.exceptions.AMQPError as exc:
        return [QueueStatus(name, None, None, error=f"broker unreachable: {exc!r}") for name, _, _ in watched]
    result = []
    try:
        for name, queues, hint in watched:
            messages = consumers = 0
            for queue in queues:
                channel = conn.channel()  # a failed passive declare closes the channel: one per queue
                try:
                    ok = channel.queue_declare(queue, passive=True).method
                    messages, consumers = messages + ok.message_count, consumers + ok.consumer_count
                    channel.close()
                except pika.exceptions.ChannelClosedByBroker:
                    result.append(QueueStatus(name, None, None, error=f"not declared yet ({hint})"))
                    break
            else:
                result.append(QueueStatus(name, messages, consumers))
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            conn.close()
    return result


@dataclass(frozen=True)
class EmbeddingStatus:
    """One model's vectors: the configured one (WALFEED_EMBEDDER), and every model a backfill has run for."""

    model: str
    configured: bool
    live_posts: int | None = None
    embedded: int | None = None
    lag_seconds: float | None = None  # age of the oldest live post without a vector (0: none missing)
    backfill_position: int | None = None
    complete: bool | None = None  # search uses the model (docs/adr/0123)
    error: str | None = None


def embedding_status(settings: Settings, now: datetime | None = None) -> list[EmbeddingStatus]:
    try:
        configured, found = embedder_main.coverage(settings.database_url)
    except SettingsError as exc:
        return [EmbeddingStatus("?", True, error=str(exc))]
    except psycopg.Error as exc:  # the database down, or not migrated yet (the message says to run migrate)
        return [EmbeddingStatus("-", True, error=str(exc).strip())]
    moment = now or datetime.now(UTC)
    return [EmbeddingStatus(c.model, c.model == configured, c.live, c.embedded,
                            (moment - c.oldest_missing).total_seconds() if c.oldest_missing else 0.0,
                            c.position, c.complete_at is not None) for c in found]


def render_embeddings(models: list[EmbeddingStatus]) -> list[str]:
    lines = ["EMBEDDINGS"]
    if not models:
        lines.append("  WALFEED_EMBEDDER=off: no model")
    for m in models:
        mark = " (WALFEED_EMBEDDER)" if m.configured else ""
        if m.error:
            lines.append(f"  {m.model}{mark}: {m.error}")
            continue
        assert m.live_posts is not None and m.embedded is not None and m.lag_seconds is not None
        share = f"{100 * m.embedded / m.live_posts:.1f}%" if m.live_posts else "100%"
        search = ("search uses it" if m.complete else
                  "backfill not complete: search answers from text (`walfeed embed backfill`)")
        lag = durations.render(timedelta(seconds=m.lag_seconds)) if m.lag_seconds else "none"
        position = "-" if m.backfill_position is None else m.backfill_position
        lines.append(f"  {m.model}{mark}: {m.embedded} of {m.live_posts} live posts ({share}), oldest without a "
                     f"vector: {lag}; backfill at post {position}, {search}")
    return lines


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    if abs(n) < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("kB", "MB", "GB"):
        value /= 1024
        if abs(value) < 1024 or unit == "GB":
            break
    return f"{value:.1f} {unit}"


def render_tables(tables: TablesStatus, now: datetime) -> list[str]:
    if tables.error:
        return ["TABLES", f"  {tables.error}"]
    oldest = "none"
    if tables.oldest_unpublished:
        oldest = durations.render(now - datetime.fromisoformat(tables.oldest_unpublished)) + " old"
    return ["TABLES",
            f"  outbox            ~{tables.outbox_rows} rows, {_size(tables.outbox_bytes)}; oldest not published "
            f"by a poller (CDC: the oldest row): {oldest}  (`walfeed prune-outbox`)",
            f"  processed_events  ~{tables.processed_rows} rows, {_size(tables.processed_bytes)}"]


def render(slot: SlotStatus, queues: list[QueueStatus], tables: TablesStatus | None = None,
           now: datetime | None = None, embeddings: list[EmbeddingStatus] | None = None) -> str:
    lines = ["REPLICATION SLOT"]
    if not slot.exists:
        lines.append(f"  {slot.name}: {slot.error}")
    else:
        state = f"active (pid {slot.active_pid})" if slot.active else "INACTIVE: no relay is streaming"
        lines += [
            f"  {slot.name}: {state}",
            f"  confirmed up to {slot.confirmed_flush_lsn}, lag {_size(slot.lag_bytes)}, "
            f"WAL retained {_size(slot.retained_bytes)} ({slot.wal_status})",
        ]
    lines.append("QUEUES")
    for q in queues:
        if q.error:
            lines.append(f"  {q.name:<44} {q.error}")
        else:
            warn = "  <- dead letters: inspect them" if q.name.endswith(".dead") and q.messages else ""
            lines.append(f"  {q.name:<44} {q.messages:>9} messages {q.consumers:>3} consumers{warn}")
    if tables is not None:
        lines += render_tables(tables, now or datetime.now(UTC))
    if embeddings is not None:
        lines += render_embeddings(embeddings)
    return "\n".join(lines)


def run(settings: Settings, *, as_json: bool = False) -> int:
    logging.getLogger("pika").setLevel(logging.CRITICAL)  # a missing queue is reported below, not as a warning
    slot, queues, tables = slot_status(settings), queue_status(settings), tables_status(settings)
    embeddings = embedding_status(settings)
    if as_json:
        sys.stdout.write(orjson.dumps({"slot": asdict(slot), "queues": [asdict(q) for q in queues],
                                       "tables": asdict(tables), "embeddings": [asdict(e) for e in embeddings]},
                                      option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(render(slot, queues, tables, embeddings=embeddings))
    healthy = slot.exists and not any(q.error and "unreachable" in q.error for q in queues)
    return 0 if healthy else 1
