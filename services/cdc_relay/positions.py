"""Which WAL position the relay may confirm to Postgres. Pure bookkeeping: no sockets, no clock.

Fed, in stream order, with "transaction began", "event published" (returns a sequence number), "transaction
committed at lsn" and, in any order, "event confirmed by the broker". It answers `confirmable`: the highest
commit position such that every event of every transaction up to it has been confirmed. Only commit positions
(or the server's idle position when nothing is open or in flight) are ever answered, and the answer never moves
backwards (sequin refuses to move its ack position backwards for the same reason: Postgres may trust it).

The tracker knows nothing about where events come from or where they go, so a polling source can reuse it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


class PositionError(RuntimeError):
    """The stream broke the protocol (commit without begin, unknown sequence number...)."""


@dataclass(slots=True)
class _Txn:
    outstanding: int = 0
    commit_lsn: int | None = None  # None while the transaction is still being received


class PositionTracker:
    def __init__(self, start_lsn: int = 0, first_seq: int = 1) -> None:
        self._confirmable = start_lsn
        self._open: _Txn | None = None
        # Transactions not yet confirmable, oldest first. Empty committed transactions are merged into the one
        # before them, so the length is bounded by the number of transactions with events in flight.
        self._waiting: deque[_Txn] = deque()
        self._by_seq: dict[int, _Txn] = {}
        self._next_seq = first_seq

    @property
    def confirmable(self) -> int:
        return self._confirmable

    @property
    def in_flight(self) -> int:
        """Events handed on (published, or queued to be) and not confirmed yet."""
        return len(self._by_seq)

    @property
    def idle(self) -> bool:
        return self._open is None and not self._waiting

    def begin(self) -> None:
        if self._open is not None:
            raise PositionError("transaction began while another one is open")
        self._open = _Txn()

    def published_many(self, count: int) -> int:
        """`count` events of the open transaction were handed to the publisher, in order (one call per batch, not
        per event). Returns the first sequence number; the others follow it."""
        if self._open is None:
            raise PositionError("event outside a transaction")
        first = self._next_seq
        self._next_seq += count
        self._open.outstanding += count
        self._by_seq.update(dict.fromkeys(range(first, first + count), self._open))
        return first

    @property
    def next_seq(self) -> int:
        """The sequence number the next published event will get."""
        return self._next_seq

    def confirmed_many(self, seqs: list[int]) -> None:
        """The broker confirmed events `seqs`, with one look for confirmable transactions at the end. Unknown or
        repeated numbers are a bug in the caller."""
        pop = self._by_seq.pop
        for seq in seqs:
            txn = pop(seq, None)
            if txn is None:
                raise PositionError(f"confirmation of unknown sequence number {seq}")
            txn.outstanding -= 1
        self._advance()

    def commit(self, lsn: int) -> None:
        """The open transaction committed; `lsn` is its end position (wal2json's nextlsn)."""
        txn = self._open
        if txn is None:
            raise PositionError("commit without begin")
        self._open = None
        txn.commit_lsn = lsn
        if txn.outstanding == 0 and self._waiting:
            # Nothing of its own to wait for: confirmable as soon as everything before it is.
            last = self._waiting[-1]
            last.commit_lsn = max(lsn, last.commit_lsn or 0)
        else:
            self._waiting.append(txn)
        self._advance()

    def server_idle_at(self, lsn: int) -> None:
        """The server reports its position while no transaction is open and no event is in flight.

        Every transaction committed before `lsn` has been received and confirmed, so `lsn` is safe to confirm:
        this is what lets the slot advance when only other tables are written.
        """
        if self.idle:
            self._move_to(lsn)

    def _advance(self) -> None:
        while self._waiting and self._waiting[0].outstanding == 0:
            lsn = self._waiting.popleft().commit_lsn
            assert lsn is not None  # only committed transactions wait
            self._move_to(lsn)

    def _move_to(self, lsn: int) -> None:
        if lsn > self._confirmable:
            self._confirmable = lsn
