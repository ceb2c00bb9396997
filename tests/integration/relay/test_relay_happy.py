from __future__ import annotations

import orjson
import pytest

from tests.harness.waiting import eventually
from tests.integration.relay.conftest import Watcher, current_lsn, slot_lsn, write_events

pytestmark = pytest.mark.integration


def test_events_arrive_with_body_and_properties_and_the_slot_advances(
        database_url: str, slot_name: str, watcher: Watcher, start_relay) -> None:  # type: ignore[no-untyped-def]
    before = slot_lsn(database_url, slot_name)
    relay = start_relay()
    ids = write_events(database_url, 30, per_txn=7)
    eventually(lambda: watcher.has_all(set(ids)), timeout=30, what="all events on the exchange")
    target = current_lsn(database_url)
    eventually(lambda: slot_lsn(database_url, slot_name) >= target, timeout=30, what="slot confirmed position")
    assert slot_lsn(database_url, slot_name) > before

    message = next(m for m in watcher.messages if m.properties.message_id == ids[0])
    body = orjson.loads(message.body)
    assert body["id"] == ids[0]
    assert body["type"] == "post.created" and message.routing_key == "post.created"
    assert body["aggregate_type"] == "post" and body["aggregate_id"] == "1"
    assert body["payload"] == {"post_id": 1, "author_id": 1}
    assert body["occurred_at"].endswith("Z")
    props = message.properties
    assert props.type == "post.created" and props.content_type == "application/json"
    assert props.delivery_mode == 2 and isinstance(props.timestamp, int)
    assert len(watcher.ids()) == len(ids)  # no crash, no duplicate
    assert relay.running()
