"""The example of docs/consumers.md ("Adding a consumer") runs as written: a consumer built from a handler, a
policy and a settings block, on the runtime and the stand-in broker, does what the page says it does."""

from __future__ import annotations

import re
from typing import Any, cast

from services.consumer import headers
from services.core import events as ev
from testkit.broker import StubBroker, StubConnection
from tests.unit.environment import ROOT

PAGE = ROOT / "docs" / "consumers.md"


def example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert len(blocks) == 1, "docs/consumers.md holds one example"
    return str(blocks[0])


def test_the_example_consumer_counts_its_events_and_retries_the_one_that_fails() -> None:
    namespace: dict[str, Any] = {"__name__": "consumers_example"}
    exec(compile(example(), str(PAGE), "exec"), namespace)  # the page's own example
    broker, connection = cast(StubBroker, namespace["broker"]), cast(StubConnection, namespace["connection"])
    assert namespace["counter"].counted == [1, 2]
    assert broker.bodies("demo.counter") == [] and connection.unacked == 0  # all settled
    retry, = broker.queues["demo.counter.retry"].messages
    assert ev.decode(retry.body).payload["post_id"] == -3
    assert retry.props.headers[headers.ATTEMPT] == 2
    assert retry.props.headers[headers.REASON] == "ValueError: no such post"
    assert broker.bodies("demo.counter.dead") == []  # not yet: two attempts are left
