"""`walfeed rebuild timelines`: compare materialized timelines with posts + follows and repair them, online, while
workers run (docs/adr/0073). Adapter: the reads and writes; what differs and how to repair is timeline_diff.py's.

Users go in batches of `batch_size` in id order; each batch is read in one snapshot, then repaired in short
transactions that take the workers' advisory locks. Progress goes to stderr with the key to resume from.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import psycopg
from psycopg.rows import dict_row

from services.cli import rebuild_sql as q
from services.cli import timeline_diff as td
from services.core.feed import TIMELINE_CAP
from services.core.settings import Settings

log = logging.getLogger(__name__)

Conn = psycopg.Connection[Any]

# Tries of one repair transaction that met a deadlock or serialization failure (a worker inserting the same row
# in the other order): rare, and the repair is idempotent.
REPAIR_TRIES = 5


class RebuildError(Exception):
    """Bad input an operator can correct: the message says what."""


@dataclass
class Totals:
    checked: int = 0
    differing: int = 0
    inserted: int = 0
    deleted: int = 0
    floors: int = 0
    flags: int = 0
    last_user: int = 0


def run(settings: Settings, *, users: Sequence[int], all_users: bool, after: int, check: bool, batch_size: int,
        settle: float, out: TextIO = sys.stdout, progress: TextIO = sys.stderr) -> int:
    if batch_size < 1:
        raise RebuildError(f"--batch-size must be at least 1, got {batch_size}")
    if settle < 0:
        raise RebuildError(f"--settle must not be negative, got {settle}")
    if users and (all_users or after):
        raise RebuildError("give either --user ID ... or --all [--after ID], not both")
    if not users and not all_users:
        raise RebuildError("say which timelines: --user ID ... or --all")
    totals = Totals(last_user=after)
    with psycopg.connect(settings.database_url, row_factory=dict_row, autocommit=True) as conn:
        for batch in _batches(conn, users, after, batch_size):
            diffs = _diff(conn, batch)
            if check and settle and any(d.differs for d in diffs):
                diffs = _settled(conn, diffs, settle)
            differing = [d for d in diffs if d.differs]
            flags = _wrong_flags(conn, batch)
            if check:
                for d in differing:
                    print(td.describe(d), file=out, flush=True)
                for user, followees in sorted(flags.items()):
                    print(f"user {user}: follows.pulled wrong for followees {', '.join(map(str, followees))}",
                          file=out, flush=True)
            else:
                _repair(conn, differing, totals)
                if flags:
                    totals.flags += conn.execute(q.REPAIR_FLAGS, {"user_ids": sorted(flags)}).rowcount
            totals.checked += len(batch)
            totals.differing += len({d.user_id for d in differing} | flags.keys())
            totals.last_user = batch[-1]
            _progress(totals, check, all_users, progress)
    verb = "differ" if check else "repaired"
    print(f"{totals.checked} users checked, {totals.differing} {verb}"
          + ("" if check else f": {totals.inserted} rows inserted, {totals.deleted} deleted, "
             f"{totals.floors} floors raised, {totals.flags} pulled flags set"), file=out, flush=True)
    return 1 if check and totals.differing else 0


def _batches(conn: Conn, users: Sequence[int], after: int, size: int) -> Iterator[list[int]]:
    """User ids in batches, id order. Named users must all exist (checked before any work)."""
    if users:
        ids = sorted(set(users))
        unknown = sorted(set(ids) - {r["id"] for r in conn.execute(q.USERS_BY_ID, {"ids": ids})})
        if unknown:
            raise RebuildError(f"no such user: {', '.join(map(str, unknown))}")
        for start in range(0, len(ids), size):
            yield ids[start:start + size]
        return
    while True:
        ids = [r["id"] for r in conn.execute(q.USERS_AFTER, {"after": after, "limit": size})]
        if not ids:
            return
        yield ids
        after = ids[-1]


def _diff(conn: Conn, user_ids: list[int]) -> list[td.Diff]:
    """One snapshot of the batch: what every user's timeline must hold and what it holds."""
    expected: dict[int, list[td.Row]] = defaultdict(list)
    actual: dict[int, list[td.Row]] = defaultdict(list)
    stray: dict[int, list[td.Stray]] = defaultdict(list)
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        floors = {r["id"]: r["timeline_floor"] for r in cur.execute(q.USERS_BY_ID, {"ids": user_ids})}
        ids = [u for u in user_ids if u in floors]  # a user deleted meanwhile has nothing to compare
        args = {"user_ids": ids, "floors": [floors[u] for u in ids], "limit": td.window(TIMELINE_CAP) + 1}
        for r in cur.execute(q.EXPECTED, args):
            expected[r["user_id"]].append(td.Row(r["post_id"], r["author_id"]))
        for r in cur.execute(q.ACTUAL, {"user_ids": ids}):
            row = td.Row(r["post_id"], r["author_id"])
            actual[r["user_id"]].append(row)
            if r["stray"] is not None:
                stray[r["user_id"]].append(td.Stray(row, r["stray"], r["post_author"]))
    return [td.diff(td.Observed(u, floors[u], expected[u], actual[u], stray[u]), TIMELINE_CAP) for u in ids]


def _wrong_flags(conn: Conn, user_ids: list[int]) -> dict[int, list[int]]:
    """The batch's users whose follows.pulled flags disagree with pulled_authors, with those followees."""
    wrong: dict[int, list[int]] = defaultdict(list)
    for r in conn.execute(q.FLAGS_WRONG, {"user_ids": user_ids}):
        wrong[r["follower_id"]].append(r["followee_id"])
    return dict(wrong)


def _settled(conn: Conn, first: list[td.Diff], settle: float) -> list[td.Diff]:
    """Read the differing users again after `settle` seconds; keep what both reads show."""
    time.sleep(settle)  # give events in flight time to be applied: the worker's lag, not a corruption
    again = {d.user_id: d for d in _diff(conn, [d.user_id for d in first if d.differs])}
    return [td.confirmed(d, again[d.user_id]) if d.user_id in again else td.Diff(d.user_id) for d in first]


def _repair(conn: Conn, diffs: list[td.Diff], totals: Totals) -> None:
    raise_to = sorted((d.user_id, d.raise_floor_to) for d in diffs if d.raise_floor_to is not None)
    if raise_to:  # first: reads are right below the new floor whatever the rows say (ADR 0023)
        with conn.transaction():
            conn.execute(q.RAISE_FLOORS, {"user_ids": [u for u, _ in raise_to], "floors": [f for _, f in raise_to]})
            conn.execute(q.BELOW_FLOORS, {"user_ids": [u for u, _ in raise_to]})
        totals.floors += len(raise_to)
    for repair in td.repairs(diffs):
        deleted, inserted = _apply(conn, repair)
        totals.deleted += deleted
        totals.inserted += inserted


def _apply(conn: Conn, repair: td.Repair) -> tuple[int, int]:
    for attempt in range(1, REPAIR_TRIES + 1):
        try:
            with conn.transaction():
                conn.execute(q.LOCK_AUTHORS, {"keys": repair.keys, "exclusive": repair.exclusive})
                deleted = inserted = 0
                if repair.delete:
                    deleted = conn.execute(q.REPAIR_DELETE, _pairs(repair.delete)).rowcount
                if repair.insert:
                    inserted = conn.execute(q.REPAIR_INSERT, _pairs(repair.insert)).rowcount
                return deleted, inserted
        except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure) as exc:
            if attempt == REPAIR_TRIES:
                raise
            log.warning("repair transaction retried", extra={"attempt": attempt, "error": repr(exc)})
    raise AssertionError("unreachable")


def _pairs(pairs: list[tuple[int, int]]) -> dict[str, list[int]]:
    return {"user_ids": [u for u, _ in pairs], "post_ids": [p for _, p in pairs]}


def _progress(totals: Totals, check: bool, all_users: bool, out: TextIO) -> None:
    done = "differ" if check else "repaired"
    resume = f" (resume with --all --after {totals.last_user})" if all_users else ""
    print(f"rebuild: {totals.checked} users checked, {totals.differing} {done}, up to user {totals.last_user}{resume}",
          file=out, flush=True)
