"""A consumer's settle channel that answers only nacks for a while is replaced by a new one
(services/consumer/settle_channel.py, docs/adr/0090): the decision and the swap, with a stand-in channel."""

from __future__ import annotations

import pika.exceptions
import pytest

from services.consumer.settle_channel import SettleChannel
from services.core.nack_streak import NackStreak


class Channel:
    def __init__(self, answers: list[str]) -> None:
        self.answers, self.published, self.confirming, self.closed = answers, 0, False, False

    def confirm_delivery(self) -> None:
        self.confirming = True

    def close(self) -> None:
        self.closed = True

    def basic_publish(self, exchange: str, routing_key: str, body: bytes, properties: object = None,
                      mandatory: bool = False) -> None:
        assert self.confirming and mandatory
        self.published += 1
        answer = self.answers.pop(0) if self.answers else "ack"
        if answer == "nack":
            raise pika.exceptions.NackError([])
        if answer == "return":
            raise pika.exceptions.UnroutableError([])


class Connection:
    """Hands out channels that nack `nacks` times each, then ack."""

    def __init__(self, nacks: int) -> None:
        self.nacks: int = nacks
        self.channels: list[Channel] = []

    def channel(self) -> Channel:
        self.channels.append(Channel(["nack"] * self.nacks))
        return self.channels[-1]


def publish(settle: SettleChannel[Channel]) -> str:
    try:
        settle.basic_publish("settle", "q.retry", b"{}", None, mandatory=True)
    except pika.exceptions.NackError:
        return "nack"
    except pika.exceptions.UnroutableError:
        return "return"
    return "ack"


def test_a_channel_nacking_for_the_whole_period_is_closed_and_the_next_publish_goes_to_a_new_one() -> None:
    now = [100.0]
    conn = Connection(nacks=1000)
    settle = SettleChannel(conn, NackStreak(reopen_after=10.0), clock=lambda: now[0])
    assert [publish(settle) for _ in range(3)] == ["nack"] * 3 and len(conn.channels) == 1
    now[0] = 110.0
    assert publish(settle) == "nack"  # the publish that tips it still fails: its original is requeued
    assert len(conn.channels) == 2 and conn.channels[0].closed and conn.channels[1].confirming
    conn.channels[1].answers.clear()
    assert publish(settle) == "ack" and conn.channels[1].published == 1 and settle.reopened == 1


@pytest.mark.parametrize("between", ["ack", "return"])
def test_an_answer_other_than_a_nack_starts_the_period_again(between: str) -> None:
    now = [100.0]
    conn = Connection(nacks=0)
    settle = SettleChannel(conn, NackStreak(reopen_after=10.0), clock=lambda: now[0])
    conn.channels[0].answers = ["nack", between, "nack", "nack"]
    publish(settle)
    now[0] = 105.0
    assert publish(settle) == between
    now[0] = 111.0
    assert publish(settle) == "nack"
    now[0] = 120.0
    assert publish(settle) == "nack" and len(conn.channels) == 1  # 9 s of nacks since the answer
