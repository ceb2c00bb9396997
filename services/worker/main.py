"""`walfeed worker`: wiring of the fan-out consumer (settings in services/worker/config.py).

Connects to Postgres (pool) and RabbitMQ (retried with backoff at start and after a loss), consumes
`{prefix}.fanout` in batches on WALFEED_WORKER_CONCURRENCY threads, and fans out large audiences on
WALFEED_WORKER_LARGE_CONCURRENCY more. SIGTERM/SIGINT: stop consuming, return what is not started, let running
batches finish (a large fan-out stops between chunks and its message is returned), exit 0.
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
from services.worker.consumer import Limits, Session
from services.worker.fanout import Effects
from services.worker.policy import RetryPolicy
from services.worker.processing import Processor

log = logging.getLogger(__name__)

# psycopg prepares a statement run 5 times, and Postgres then may keep one generic plan for it: a worker started on
# nearly empty tables kept sequential-scan plans for the life of its connections (on a server without autovacuum,
# nothing ever re-planned them). Planning costs well under a millisecond per statement, a few per batch of 200.
PLAN_EACH_BATCH = "-c plan_cache_mode=force_custom_plan"
PRECONDITION_FAILED = 406  # AMQP reply code of a redeclaration with other arguments
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
    pool = make_pool(settings.database_url, min_size=1, max_size=worker.concurrency + worker.large_concurrency,
                     name="walfeed-worker", options=PLAN_EACH_BATCH)
    pool.open()
    effects = Effects(pool, settings.celebrity_threshold, should_stop=stopping.is_set)
    processor = Processor(effects.apply, effects.fan_out_large,
                          RetryPolicy(worker.max_attempts, worker.retry_base, worker.retry_cap))
    limits = Limits(worker.batch_size, worker.concurrency, worker.prefetch, park_ms=round(worker.retry_cap * 1000),
                    dead_max_length=worker.dead_max_length)
    log.info("worker starting", extra={"concurrency": worker.concurrency, "batch_size": worker.batch_size,
                                       "prefetch": worker.prefetch, "max_attempts": worker.max_attempts,
                                       "prefix": settings.amqp_prefix})
    try:
        with ThreadPoolExecutor(worker.concurrency, thread_name_prefix="batch") as batches, \
                ThreadPoolExecutor(worker.large_concurrency, thread_name_prefix="large") as large:
            while not stopping.is_set():
                conn = connect_with_retry(settings.amqp_url, name="walfeed-worker", should_stop=stopping.is_set)
                if conn is None:
                    break
                session = Session(conn, topology, processor, batches, large, limits, stopping)
                try:
                    session.run()
                except pika.exceptions.ChannelClosedByBroker as exc:
                    if exc.reply_code != PRECONDITION_FAILED:
                        raise
                    log.error("a queue exists with other arguments than this worker declares (an older walfeed, or "
                              "another WALFEED_WORKER_DEAD_MAX_LENGTH): drain and delete it, or set the setting to "
                              "match; see README 'Upgrading'", extra={"error": exc.reply_text})
                    return 2
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
