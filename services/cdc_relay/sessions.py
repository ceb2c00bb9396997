"""The relay's tokens: sequence numbers unique across replication sessions, and which of them are stale. Pure.

Session n numbers its events from n << SESSION_SEQ_BITS (the position tracker counts up from `first_seq`). When a
session ends, Postgres sends its unconfirmed events again in the next one: from then on its numbers are stale, so
the publisher does not publish those messages again (`is_current`, then `Publisher.drop_stale`) and their
confirmations are not counted (`current`). docs/adr/0014.

A message's token is its event's sequence number, or for a group's message (grouping.py, docs/adr/0095) the range of
its events' numbers: consecutive, and all of one session, since a group is made of events read together.
"""

from __future__ import annotations

SESSION_SEQ_BITS = 40  # sequence numbers of session n are n << 40, n << 40 + 1...

Token = int | range  # one event's sequence number, or a group's


def seqs(tokens: list[Token]) -> list[int]:
    """The sequence numbers of the events of the messages whose tokens are `tokens`, in order."""
    numbers: list[int] = []
    for token in tokens:
        if isinstance(token, int):
            numbers.append(token)
        else:
            numbers.extend(token)
    return numbers


class Sessions:
    def __init__(self) -> None:
        self._ended = 0  # replication sessions ended so far
        self.first_seq = 0  # the current session's first sequence number

    def end(self) -> None:
        self._ended += 1
        self.first_seq = self._ended << SESSION_SEQ_BITS

    def is_current(self, token: Token) -> bool:
        return (token if isinstance(token, int) else token.start) >= self.first_seq

    def current(self, seqs: list[int]) -> list[int]:
        """`seqs` without the stale ones: usually all of them, found with one look at the lowest."""
        if seqs and min(seqs) < self.first_seq:
            return [seq for seq in seqs if seq >= self.first_seq]
        return seqs
