"""`walfeed rebuild timelines`: the pure part. How one user's materialized timeline differs from what the worker
would have written (docs/guarantees.md, ADR 0022-0024), and which writes repair it in which transactions
(docs/adr/0073). No I/O: rebuild.py reads the rows these take and runs the statements.

What a timeline must hold: for post ids at or above the user's floor, exactly the user's alive posts (the api writes
the own row with the post, docs/adr/0157) and the alive, pushed posts (`fanned_out` true: pulled posts are merged at
read time, undecided ones are not fanned out yet) of the accounts the user follows. Below the floor, rows may be
missing but every row there must be valid.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

# Expected rows read per user, at most: twice the cap. A timeline the worker keeps holds at most about the cap
# plus a quarter above its floor (ADR 0023); more than this many expected rows above the floor means the floor is
# far too low (e.g. timelines emptied by hand, floors reset), and the repair raises it to the cap-th newest post
# instead of materializing every post ever written.
WINDOW_CAPS: Final = 2

# Advisory locks per repair transaction (one per author whose rows it writes): far below the lock table's
# default capacity (max_locks_per_transaction x connections), and short transactions for the workers that wait.
MAX_AUTHORS_PER_TRANSACTION: Final = 100


@dataclass(frozen=True, slots=True, order=True)
class Row:
    """One timeline row: a post of an author in a user's timeline."""

    post_id: int
    author_id: int


@dataclass(frozen=True, slots=True)
class Stray:
    """A materialized row that must not be there, and why (the database's own words, see rebuild_sql.ACTUAL)."""

    row: Row
    reason: str  # "no such post", "wrong author", "deleted", "not pushed", "not followed"
    post_author: int | None = None  # the post's own author, where it is not the row's ("wrong author")


@dataclass(frozen=True, slots=True)
class Observed:
    """What one read found for one user: the floor, the expected rows at or above it (newest first, at most
    window + 1), and the materialized rows with the reason of each stray one."""

    user_id: int
    floor: int
    expected: Sequence[Row]
    actual: Sequence[Row]
    stray: Sequence[Stray]


@dataclass(frozen=True, slots=True)
class Diff:
    user_id: int
    missing: tuple[Row, ...] = ()
    stray: tuple[Stray, ...] = ()
    floor: int = 0
    raise_floor_to: int | None = None  # the floor is too low for what the user receives: raise it here

    @property
    def differs(self) -> bool:
        return bool(self.missing or self.stray or self.raise_floor_to is not None)


def window(cap: int) -> int:
    return cap * WINDOW_CAPS


def diff(seen: Observed, cap: int) -> Diff:
    """How the user's timeline differs from its definition, and the floor the repair needs."""
    stray = tuple(sorted(seen.stray, key=lambda s: s.row))
    valid = {r.post_id for r in seen.actual} - {s.row.post_id for s in stray}
    expected = list(seen.expected)
    raise_to = None
    if len(expected) > window(cap):
        expected = expected[:cap]
        raise_to = expected[-1].post_id
    missing = tuple(sorted(r for r in expected if r.post_id not in valid))
    return Diff(seen.user_id, missing, stray, seen.floor, raise_to)


def confirmed(first: Diff, second: Diff) -> Diff:
    """What two reads of one user, some time apart, agree on: a difference the worker was about to mend (an event
    in flight, a large fan-out between chunks) shows in one read only."""
    assert first.user_id == second.user_id
    again = {s.row for s in second.stray}
    return Diff(first.user_id,
                tuple(r for r in first.missing if r in second.missing),
                tuple(s for s in first.stray if s.row in again),
                second.floor,
                second.raise_floor_to if first.raise_floor_to is not None else None)


@dataclass(frozen=True, slots=True)
class Repair:
    """One repair transaction: the advisory locks it takes (keys ascending, True = exclusive), then the rows it
    deletes (if still invalid) and inserts (if still valid), as (user, post) pairs in primary-key order."""

    keys: list[int]
    exclusive: list[bool]
    delete: list[tuple[int, int]] = field(default_factory=list)
    insert: list[tuple[int, int]] = field(default_factory=list)


def repairs(diffs: Iterable[Diff], max_authors: int = MAX_AUTHORS_PER_TRANSACTION) -> list[Repair]:
    """The writes of some diffs grouped by author into transactions of at most `max_authors` locks. An author whose
    rows are deleted is locked exclusively (as the worker's state-change events lock it), one whose rows are only
    inserted shared (as a fan-out does): the argument is in docs/adr/0073."""
    deletes: dict[int, list[tuple[int, int]]] = {}
    inserts: dict[int, list[tuple[int, int]]] = {}
    also: dict[int, set[int]] = {}  # a row of the wrong author: its delete also locks the post's own author
    for d in diffs:
        for s in d.stray:
            deletes.setdefault(s.row.author_id, []).append((d.user_id, s.row.post_id))
            if s.post_author is not None and s.post_author != s.row.author_id:
                also.setdefault(s.row.author_id, set()).add(s.post_author)
        for r in d.missing:
            inserts.setdefault(r.author_id, []).append((d.user_id, r.post_id))
    authors = sorted(deletes.keys() | inserts.keys())
    result = []
    for start in range(0, len(authors), max_authors):
        group = authors[start:start + max_authors]
        exclusive = set(group) & deletes.keys() | {a for k in group for a in also.get(k, ())}
        keys = sorted(set(group) | exclusive)
        result.append(Repair(keys, [k in exclusive for k in keys],
                             sorted(p for k in group for p in deletes.get(k, [])),
                             sorted(p for k in group for p in inserts.get(k, []))))
    return result


def describe(d: Diff, shown: int = 10) -> str:
    """One line for an operator: what differs in one user's timeline."""
    parts = []
    if d.missing:
        parts.append(f"{len(d.missing)} missing (posts {_ids([r.post_id for r in d.missing], shown)})")
    if d.stray:
        reasons = ", ".join(f"{s.row.post_id} {s.reason}" for s in d.stray[:shown])
        more = f", ... {len(d.stray) - shown} more" if len(d.stray) > shown else ""
        parts.append(f"{len(d.stray)} stray (posts {reasons}{more})")
    if d.raise_floor_to is not None:
        parts.append(f"floor {d.floor} too low: more than {WINDOW_CAPS} x the cap of posts above it, "
                     f"to raise to {d.raise_floor_to}")
    return f"user {d.user_id}: " + "; ".join(parts)


def _ids(ids: list[int], shown: int) -> str:
    text = ", ".join(map(str, ids[:shown]))
    return text + (f", ... {len(ids) - shown} more" if len(ids) > shown else "")
