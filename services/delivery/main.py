"""`walfeed deliver --channel webhook|email`: wiring of one channel's delivery worker (settings in config.py).

Connects to Postgres (pool) and RabbitMQ (retried with backoff at start and after a loss), consumes
`{prefix}.deliveries.{channel}` in batches on the consumer runtime, its statements on the connection thread and its
sends on WALFEED_DELIVERY_CONCURRENCY threads (services/consumer/connection_thread.py, ADR 0082, 0125).
SIGTERM/SIGINT: stop consuming, return what is not sending yet, let running sends finish and record them, exit 0.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Final

from services.consumer.connection import Connection
from services.consumer.connection_thread import ConnectionThread
from services.consumer.session import Session
from services.consumer.settler import Counters
from services.core import queues
from services.core.amqp import consume
from services.core.db import make_pool
from services.core.metrics import serve as serve_metrics
from services.core.settings import Settings
from services.core.stopping import on_signals
from services.core.topology import DELIVERY_RETRY_DELAYS_MS, Topology
from services.delivery import metrics
from services.delivery.broker import DeliveryQueues
from services.delivery.config import DeliverySettings
from services.delivery.mail import EmailSender
from services.delivery.processing import Limits, Processor, Sender
from services.delivery.store import Store
from services.delivery.webhook import WebhookSender

log = logging.getLogger(__name__)

PARK_MS: Final = next(d for d in DELIVERY_RETRY_DELAYS_MS if d >= 60_000)  # a refused dead letter waits ~1 min


def _sender(delivery: DeliverySettings) -> WebhookSender | EmailSender:
    if delivery.email is not None:
        return EmailSender(delivery.email, delivery.timeout)
    return WebhookSender(delivery.ssrf, delivery.connect_timeout, delivery.timeout, delivery.concurrency)


def session(connection: Connection, topology: Topology, channel: str, processor: Processor, threads: Executor,
            concurrency: int, dead_max_length: int, stopping: threading.Event,
            queue_type: str = queues.CLASSIC) -> Session:
    """Channel `channel`'s consumer on one connection: the runtime's Session with the statements on the connection
    thread and the sends on `threads` (`concurrency` of them)."""
    return Session(connection, DeliveryQueues(topology, channel, dead_max_length, queue_type),
                   ConnectionThread(processor, threads, concurrency), stopping,
                   prefetch=concurrency * 4,  # the next batch is here when a send finishes
                   park_ms=PARK_MS, counters=Counters(dead=metrics.DEAD.labels(channel).inc))


def run(settings: Settings, channel: str) -> int:
    delivery = DeliverySettings.from_env(channel)
    stopping = on_signals()
    serve_metrics(delivery.metrics_port, delivery.metrics_host)
    topology = Topology(settings.amqp_prefix)
    # No check round trip per checkout: a query on a broken connection postpones its delivery (processing.py).
    # Autocommit: each of the worker's statements is one transaction of its own (services/delivery/sql.py).
    pool = make_pool(settings.database_url, min_size=1, max_size=delivery.concurrency, name=f"walfeed-{channel}",
                     check=False, autocommit=True)
    pool.open()
    sender = _sender(delivery)
    checked: Sender = sender
    processor = Processor(Store(pool), checked, Limits(channel, delivery.retry, delivery.rate, delivery.burst,
                                                                 delivery.hosts))
    log.info("delivery worker starting", extra={"channel": channel, "concurrency": delivery.concurrency,
                                                "max_attempts": delivery.retry.max_attempts,
                                                "prefix": settings.amqp_prefix})
    try:
        with ThreadPoolExecutor(delivery.concurrency, thread_name_prefix=channel) as threads:
            code = consume(
                settings.amqp_url, f"walfeed-deliver-{channel}", stopping,
                lambda conn: session(conn, topology, channel, processor, threads, delivery.concurrency,
                                     delivery.dead_max_length, stopping, settings.amqp_queue_type),
                "a delivery queue exists with other arguments than this worker declares (another "
                "WALFEED_DELIVERY_DEAD_MAX_LENGTH?): set the setting to match, or drain and delete the queue")
    finally:
        sender.close()
        pool.close()
    log.info("delivery worker stopped", extra={"channel": channel})
    return code
