"""What a message costs pika's BlockingConnection (the worker's client) and RabbitMQ, before any work.

    .venv/bin/python -m bench.consume_floor [--messages 20000] [--runs 3]

Publishes --messages persistent messages shaped like the relay's (an event's JSON, its id and type) to a queue of
its own, then consumes them as the worker does (manual acks, `multiple=True` once per batch, the worker's default
batch size and prefetch) and prints the CPU per message of this process and of RabbitMQ (the whole broker: other
users of the machine count too). The consumer figure is pika's floor, not the cheapest client possible: what the
fan-out worker spends per message above it is its own (decoding, batching, the database round trips, settling;
the fan-out ratio, docs/results.md), and a leaner AMQP client could go below it. Removes its queue at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid

import pika

from bench.lib import infra, proc
from services.worker import config as worker_config

WORKER = worker_config.from_env({})  # the worker's defaults
ACK_EVERY, PREFETCH = WORKER.batch_size, WORKER.prefetch


def broker_cpu() -> float:
    """CPU seconds of the RabbitMQ server processes (beam.smp) so far."""
    return sum(cpu for _name, cpu in proc.by_name({"beam.smp"}).values())


def run(messages: int) -> tuple[float, float]:
    """(this process's, RabbitMQ's) CPU microseconds per message consumed."""
    queue = f"wfbench_floor_{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(pika.URLParameters(infra.AMQP))
    try:
        channel = conn.channel()
        channel.queue_declare(queue, durable=True)
        channel.confirm_delivery()
        event_id = str(uuid.uuid4())
        body = json.dumps({"id": event_id, "type": "post.created", "aggregate_type": "post", "aggregate_id": "1",
                           "occurred_at": "2026-12-01T12:00:00+00:00", "payload": {"post_id": 1, "author_id": 2}})
        props = pika.BasicProperties(message_id=event_id, type="post.created", delivery_mode=2,
                                     content_type="application/json")
        for _ in range(messages):
            channel.basic_publish("", queue, body.encode(), props)
        channel.basic_qos(prefetch_count=PREFETCH)
        got, pending = [0], [0]

        def on_message(chan: pika.adapters.blocking_connection.BlockingChannel, method: pika.spec.Basic.Deliver,
                       _props: pika.BasicProperties, _body: bytes) -> None:
            got[0] += 1
            pending[0] = method.delivery_tag
            if got[0] % ACK_EVERY == 0:
                chan.basic_ack(method.delivery_tag, multiple=True)

        channel.basic_consume(queue, on_message)
        own, broker = time.process_time(), broker_cpu()
        while got[0] < messages:
            conn.process_data_events(time_limit=0.1)
        if got[0] % ACK_EVERY:
            channel.basic_ack(pending[0], multiple=True)
        own, broker = time.process_time() - own, broker_cpu() - broker
    finally:
        conn.close()
        with pika.BlockingConnection(pika.URLParameters(infra.AMQP)) as cleanup:
            cleanup.channel().queue_delete(queue)
    return 1e6 * own / messages, 1e6 * broker / messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results = [run(args.messages) for _ in range(args.runs)]
    for i, (own, broker) in enumerate(results, 1):
        print(f"run {i}: consumer {own:.1f} µs/message, RabbitMQ {broker:.1f} µs/message")
    print(f"median of {args.runs}: consumer {statistics.median(r[0] for r in results):.1f} µs/message, "
          f"RabbitMQ {statistics.median(r[1] for r in results):.1f} µs/message ({args.messages} messages a run)")


if __name__ == "__main__":
    main()
