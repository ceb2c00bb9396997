"""metrics.observe counts a batch's settled messages as one observation each, with one update per label set."""

from __future__ import annotations

from prometheus_client import REGISTRY

from services.consumer import metrics, outcomes
from services.consumer.messages import Result
from services.core import events as ev


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_batch_counts_each_message_once_by_type_and_outcome() -> None:
    kind = "metrics.test"  # a label value no other test uses: the registry is the process's
    event = ev.Event.new(ev.POST_CREATED, 1, {"post_id": 1, "author_id": 2})
    results = [Result(outcomes.ACK, kind, "a", "pushed", 0.002, event),
               Result(outcomes.ACK, kind, "b", "pushed", 0.002, event),
               Result(outcomes.Retry(2, 10, "boom"), kind, "c", "failed", 0.002),
               Result(outcomes.Dead("bad", 1), "malformed", None, "malformed", 0.002)]
    before = {"acks": _value("walfeed_worker_messages_total", type=kind, outcome="ack"),
              "retried": _value("walfeed_worker_messages_total", type=kind, outcome="retry"),
              "retries": _value("walfeed_worker_retries_total", type=kind),
              "dead": _value("walfeed_worker_dead_letters_total", type="malformed"),
              "handled": _value("walfeed_worker_handler_seconds_count", type=kind),
              "delays": _value("walfeed_worker_event_delay_seconds_count", type=kind)}

    metrics.observe(results)

    assert _value("walfeed_worker_messages_total", type=kind, outcome="ack") - before["acks"] == 2
    assert _value("walfeed_worker_messages_total", type=kind, outcome="retry") - before["retried"] == 1
    assert _value("walfeed_worker_retries_total", type=kind) - before["retries"] == 1
    assert _value("walfeed_worker_dead_letters_total", type="malformed") - before["dead"] == 1
    assert _value("walfeed_worker_handler_seconds_count", type=kind) - before["handled"] == 3
    assert _value("walfeed_worker_event_delay_seconds_count", type=kind) - before["delays"] == 2  # acked events only
