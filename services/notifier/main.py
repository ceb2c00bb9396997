"""`walfeed notifier`: wiring of the notification consumer (settings in services/notifier/config.py, design in
docs/adr/0080).

Consumes `{prefix}.notifier` (bound to post.* and follow.*, its own retry and dead queues) on the consumer runtime
(services/consumer/batched.py: batches on WALFEED_NOTIFIER_CONCURRENCY threads, manual acks, retries, dead
letters), and applies each batch with services/notifier/effects.py. On every connection it first
declares the delivery queues, so the delivery events it writes are never unroutable. SIGTERM/SIGINT: stop
consuming, return what is not started, let running batches finish, exit 0.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from services.consumer import batched
from services.consumer.processor import Processor
from services.core.amqp import consume, declare_delivery_queues
from services.core.db import PLAN_EACH_BATCH, make_pool
from services.core.metrics import serve as serve_metrics
from services.core.settings import Settings
from services.core.stopping import on_signals
from services.core.topology import Topology
from services.notifier import config
from services.notifier.effects import Effects

log = logging.getLogger(__name__)



def run(settings: Settings) -> int:
    settings_of = config.from_env()
    notifier = settings_of.consumer
    stopping = on_signals()
    serve_metrics(notifier.metrics_port, notifier.metrics_host)
    topology = Topology(settings.amqp_prefix)
    pool = make_pool(settings.database_url, min_size=1, max_size=notifier.concurrency, name="walfeed-notifier",
                     options=PLAN_EACH_BATCH)  # as the worker's, for the same reason
    pool.open()
    processor = Processor(Effects(pool, settings_of.author).apply, batched.retry_of(notifier))
    limits = batched.limits_of(notifier, settings.amqp_queue_type)
    # The delivery queues first, on every connection: the delivery events it writes are never unroutable.
    deliveries = partial(declare_delivery_queues, topology=topology, queue_type=settings.amqp_queue_type)

    log.info("notifier starting", extra={"concurrency": notifier.concurrency, "batch_size": notifier.batch_size,
                                         "prefetch": notifier.prefetch, "max_attempts": notifier.max_attempts,
                                         "prefix": settings.amqp_prefix})
    try:
        with ThreadPoolExecutor(notifier.concurrency, thread_name_prefix="batch") as batches:
            code = consume(settings.amqp_url, "walfeed-notifier", stopping,
                           lambda conn: batched.session(conn, topology.notifier, processor, batches, limits, stopping,
                                                        also=deliveries),
                           f"a queue exists with other arguments than the notifier declares (an older walfeed, or "
                           f"another {config.PREFIX}_DEAD_MAX_LENGTH): drain and delete it, or set the setting to "
                           "match; see README 'Upgrading'")
    finally:
        pool.close()
    log.info("notifier stopped")
    return code
