"""`walfeed worker`: wiring of the fan-out consumer (settings in services/worker/config.py).

Connects to Postgres (pool) and RabbitMQ (retried with backoff at start and after a loss), consumes
`{prefix}.fanout` in batches on WALFEED_WORKER_CONCURRENCY threads, and fans out large audiences on
WALFEED_WORKER_LARGE_CONCURRENCY more. SIGTERM/SIGINT: stop consuming, return what is not started, let running
batches finish (a large fan-out stops between chunks and its message is returned), exit 0.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from services.consumer import batched
from services.consumer.processor import Processor
from services.core import sdnotify, tracing
from services.core.amqp import consume
from services.core.db import PLAN_EACH_BATCH, make_pool
from services.core.metrics import serve as serve_metrics
from services.core.settings import Settings
from services.core.stopping import on_signals
from services.core.topology import Topology
from services.worker import config
from services.worker.fanout import Effects

log = logging.getLogger(__name__)

def run(settings: Settings) -> int:
    worker = config.from_env()
    traces = tracing.setup("walfeed-worker")
    stopping = on_signals(then=lambda: sdnotify.stopping("finishing running batches"))
    serve_metrics(worker.metrics_port, worker.metrics_host)
    topology = Topology(settings.amqp_prefix)
    pool = make_pool(settings.database_url, min_size=1, max_size=worker.concurrency + worker.large_concurrency,
                     name="walfeed-worker", options=PLAN_EACH_BATCH)
    pool.open()
    effects = Effects(pool, settings.celebrity_threshold, should_stop=stopping.is_set)
    processor = Processor(effects.apply, batched.retry_of(worker), large=effects.fan_out_large)
    limits = batched.limits_of(worker, settings.amqp_queue_type)
    log.info("worker starting", extra={"concurrency": worker.concurrency, "batch_size": worker.batch_size,
                                       "prefetch": worker.prefetch, "max_attempts": worker.max_attempts,
                                       "prefix": settings.amqp_prefix})
    try:
        with ThreadPoolExecutor(worker.concurrency, thread_name_prefix="batch") as batches, \
                ThreadPoolExecutor(worker.large_concurrency, thread_name_prefix="large") as large:
            code = consume(
                settings.amqp_url, "walfeed-worker", stopping,
                lambda conn: batched.session(conn, topology.fanout, processor, batches, limits, stopping, traces,
                                             large=large),
                "a queue exists with other arguments than this worker declares (an older walfeed, or another "
                "WALFEED_WORKER_DEAD_MAX_LENGTH): drain and delete it, or set the setting to match; see README "
                "'Upgrading'")
    finally:
        pool.close()
    log.info("worker stopped")
    return code
