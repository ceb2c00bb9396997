"""`walfeed relay`: wiring of the CDC relay (settings in config.py, the loop in relay.py).

`bootstrap` builds the process's parts and hands them to the relay, as cosmicpython's bootstrap.py does: unit
tests hand it in-memory ones instead (testing.py).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable

from pika.adapters.select_connection import IOLoop

from services.cdc_relay import metrics
from services.cdc_relay.checkpoint import CheckpointThread
from services.cdc_relay.config import RelaySettings
from services.cdc_relay.failover import Recovery, Republisher
from services.cdc_relay.publisher import Publisher
from services.cdc_relay.relay import Relay
from services.cdc_relay.retention import RetentionThread
from services.cdc_relay.sessions import Token
from services.cdc_relay.stream import ReplicationStream
from services.core import tracing
from services.core.settings import Settings
from services.core.topology import Topology

log = logging.getLogger(__name__)

SOURCES = ("cdc", "poll")


def run(settings: Settings, source: str) -> int:
    if source not in SOURCES:
        log.error("unknown relay source", extra={"source": source, "known": ",".join(SOURCES)})
        return 2
    relay_settings = RelaySettings.from_env()
    traces = tracing.setup("walfeed-relay")
    metrics.serve(relay_settings.metrics_port, relay_settings.metrics_host)
    keeper = RetentionThread(settings.database_url, settings.slot, relay_settings.lag_interval,
                             relay_settings.prune_older_than, relay_settings.prune_interval)
    keeper.start()
    try:
        return _run_source(settings, relay_settings, source, traces)
    finally:
        keeper.stop()


def _run_source(settings: Settings, relay_settings: RelaySettings, source: str, traces: tracing.Tracing) -> int:
    if source == "poll":  # the polling outbox relay (poll.py, docs/adr/0040): no slot, no lag probe
        from services.cdc_relay import poll

        return poll.run(settings, relay_settings, traces)
    probe = metrics.SlotLagProbe(settings.database_url, settings.slot, relay_settings.lag_interval)
    probe.start()
    checkpoints = CheckpointThread(settings.database_url, settings.slot, relay_settings.checkpoint_interval)
    checkpoints.start()
    try:
        stopping = threading.Event()  # read by a failover recovery, which blocks the loop while it republishes
        relay = bootstrap(settings, relay_settings, traces, stopping.is_set)

        def on_signal(_signum: int, _frame: object) -> None:
            stopping.set()
            relay.request_stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        return relay.run()
    finally:
        checkpoints.stop()
        probe.stop()


def bootstrap(settings: Settings, relay: RelaySettings, traces: tracing.Tracing = tracing.DISABLED,
              stopping: Callable[[], bool] = lambda: False) -> Relay:
    """The relay on one IOLoop shared by the replication socket, the broker connection and the timers (ADR 0014).
    Before each stream, a failover check (ADR 0091): on a new primary the slot is created and what the checkpoint
    does not cover republished, on a publisher of its own, while the loop waits."""
    ioloop = IOLoop()
    topology = Topology(settings.amqp_prefix)

    def make_republisher() -> Republisher:
        return Republisher(settings.amqp_url, topology, relay.window, relay.blocked_timeout, traces)

    recovery = Recovery(settings.database_url, settings.slot, relay.window, make_republisher, stopping)

    def open_stream() -> ReplicationStream:
        recovery.prepare()
        return ReplicationStream.open(settings.database_url, settings.slot, relay.status_interval)

    def make_publisher(on_confirmed: Callable[[list[Token]], None],
                       is_current: Callable[[Token], bool]) -> Publisher[Token]:
        return Publisher(ioloop, settings.amqp_url, topology, on_confirmed, window=relay.window,
                         is_current=is_current, blocked_timeout=relay.blocked_timeout, traces=traces)

    return Relay(relay, settings.slot, ioloop, open_stream, make_publisher)
