"""`walfeed worker`: wiring of the fan-out consumer (settings in services/worker/config.py).

Connects to Postgres (pool) and RabbitMQ (retried with backoff at start and after a loss), consumes
`{prefix}.fanout` with WALFEED_WORKER_CONCURRENCY handler threads. SIGTERM/SIGINT: stop consuming, let running
handlers finish (a long fan-out stops between chunks and its message is returned), exit 0.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from types import FrameType

import pika.exceptions

from services.core.amqp import connect_with_retry
from services.core.db import make_pool
from services.core.settings import Settings
from services.core.topology import Topology
from services.worker import metrics
from services.worker.config import WorkerSettings
from services.worker.consumer import Session
from services.worker.fanout import Effects
from services.worker.policy import RetryPolicy
from services.worker.processing import Processor

log = logging.getLogger(__name__)

_RECONNECT_PAUSE = 1.0  # seconds after a lost connection before connecting again (connect itself backs off)


def run(settings: Settings) -> int:
    worker = WorkerSettings.from_env()
    stopping = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("stop requested", extra={"signal": signal.Signals(signum).name})
        stopping.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    metrics.serve(worker.metrics_port, worker.metrics_host)
    topology = Topology(settings.amqp_prefix)
    pool = make_pool(settings.database_url, min_size=1, max_size=worker.concurrency, name="walfeed-worker")
    pool.open()
    effects = Effects(pool, settings.celebrity_threshold, should_stop=stopping.is_set)
    processor = Processor(effects.handle, RetryPolicy(worker.max_attempts, worker.retry_base, worker.retry_cap))
    log.info("worker starting", extra={"concurrency": worker.concurrency, "prefetch": worker.prefetch,
                                       "max_attempts": worker.max_attempts, "prefix": settings.amqp_prefix})
    try:
        with ThreadPoolExecutor(worker.concurrency, thread_name_prefix="fanout") as executor:
            while not stopping.is_set():
                conn = connect_with_retry(settings.amqp_url, name="walfeed-worker", should_stop=stopping.is_set)
                if conn is None:
                    break
                session = Session(conn, topology, processor, executor, worker.prefetch, stopping)
                try:
                    session.run()
                except pika.exceptions.AMQPError as exc:
                    log.warning("broker connection lost, reconnecting", extra={"error": repr(exc)})
                    session.abandon()
                    stopping.wait(_RECONNECT_PAUSE)
                finally:
                    with contextlib.suppress(pika.exceptions.AMQPError):
                        if conn.is_open:
                            conn.close()
    finally:
        pool.close()
    log.info("worker stopped")
    return 0
