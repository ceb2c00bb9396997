"""Publisher-confirm bookkeeping for one AMQP channel. Pure: fed with what was sent and what the broker said.

The broker numbers the messages of a channel in confirm mode 1, 2, 3... (delivery tags) and answers with
basic.ack / basic.nack, possibly `multiple` (everything up to the tag). A mandatory message that no queue
takes comes back as basic.return *before* its ack: such an ack is not a success. Items whose outcome is a
failure are handed back to be retried; on a new channel the numbering restarts and everything unconfirmed is
handed back too (the broker may or may not have it: resending is the at-least-once answer).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class Outcome(Generic[T]):
    confirmed: list[T] = field(default_factory=list)
    failed: list[T] = field(default_factory=list)  # nacked or returned: publish again


class ConfirmBook(Generic[T]):
    def __init__(self) -> None:
        self._next_tag = 1
        self._unconfirmed: dict[int, tuple[str, T]] = {}  # tag -> (message id, item), in tag order
        self._low = 1  # every tag below it is settled
        self._returned: Counter[str] = Counter()  # message ids returned, waiting for their ack

    def __len__(self) -> int:
        return len(self._unconfirmed)

    def sent(self, message_id: str, item: T) -> int:
        tag = self._next_tag
        self._next_tag += 1
        self._unconfirmed[tag] = (message_id, item)
        return tag

    def sent_many(self, entries: list[tuple[str, T]]) -> None:
        """`sent` for each (message id, item), in publish order: one dict update instead of a call per message."""
        first = self._next_tag
        self._next_tag += len(entries)
        self._unconfirmed.update(zip(range(first, self._next_tag), entries, strict=True))

    def returned(self, message_id: str) -> None:
        self._returned[message_id] += 1

    def acked(self, tag: int, multiple: bool) -> Outcome[T]:
        outcome: Outcome[T] = Outcome()
        settled = self._settle(tag, multiple)
        if not self._returned:  # the usual case: nothing came back
            outcome.confirmed = [item for _, item in settled]
            return outcome
        for message_id, item in settled:
            if self._returned[message_id] > 0:
                self._returned[message_id] -= 1
                if not self._returned[message_id]:
                    del self._returned[message_id]
                outcome.failed.append(item)
            else:
                outcome.confirmed.append(item)
        return outcome

    def nacked(self, tag: int, multiple: bool) -> Outcome[T]:
        outcome: Outcome[T] = Outcome()
        for message_id, item in self._settle(tag, multiple):
            self._returned.pop(message_id, None)
            outcome.failed.append(item)
        return outcome

    def reset(self) -> list[T]:
        """The channel is gone: every unconfirmed item, oldest first; numbering restarts at 1."""
        items = [item for _, item in self._unconfirmed.values()]
        self._unconfirmed.clear()
        self._returned.clear()
        self._next_tag = self._low = 1
        return items

    def _settle(self, tag: int, multiple: bool) -> list[tuple[str, T]]:
        pop = self._unconfirmed.pop
        if multiple:
            # Tags from the low mark up to `tag`, each looked at once over the book's life (a loop over the dict's
            # head would rescan the slots its own pops left behind: quadratic in the window).
            settled = [entry for t in range(self._low, tag + 1) if (entry := pop(t, None)) is not None]
        else:
            entry = pop(tag, None)
            settled = [] if entry is None else [entry]
        # The low mark moves past every settled tag, single acks' too: else the first `multiple` ack after a long run
        # of single ones (a quiet broker acks one by one) would walk every tag since the channel opened, on the loop.
        unconfirmed, low = self._unconfirmed, max(self._low, tag + 1) if multiple else self._low
        while low < self._next_tag and low not in unconfirmed:
            low += 1
        self._low = low
        return settled
