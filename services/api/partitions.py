"""Which partition of `timelines` holds a user's rows, decided without I/O (docs/adr/0153).

`timelines` is hash-partitioned by user_id (db/init/012, docs/adr/0093). A statement on the parent, run as a
generic plan, locks every partition before it prunes to the reader's one; naming the reader's partition locks one.
Postgres puts a row in the partition whose (modulus, remainder) bound satisfies `hash % modulus == remainder`,
where `hash` is its row hash of the key: for one bigint key, `hash_combine64(0, hashint8extended(key, seed))`
with the fixed HASH_PARTITION_SEED (src/backend/partitioning/partbounds.c, src/common/hashfn.c). That hash is part
of Postgres's on-disk format (pg_upgrade keeps hash partitions as they are), so it is computed here, and
tests/integration/api/test_partition_names.py holds it against the server's own routing.

The layout (each partition's name and bound) comes from the catalog (`LAYOUT`); anything but a set of hash
partitions that covers every remainder exactly once is no layout (`Layout.parse` returns None) and the api reads
through the parent, as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

SEED: Final = 0x7A5B22367996DCFD  # HASH_PARTITION_SEED
_COMBINE: Final = 0x49A0F4DD15E5A8E3  # hash_combine64's constant
_M32: Final = 0xFFFFFFFF
_M64: Final = 0xFFFFFFFFFFFFFFFF
MAX_MODULUS: Final = 4096  # a layout of more partitions than this is read through the parent
CACHED_USERS: Final = 65_536  # partitions remembered per process, ~10 MB at most

# The partitions of timelines: schema, name, kind (r: a table, p: itself partitioned), bound and partition
# constraint as Postgres prints them. Run as the api's role (the catalog is readable by every role) and on the
# api's kind of connection, so that the constraint is printed as the home read's check prints it
# (sql.home_above_floor).
LAYOUT: Final = """
SELECT n.nspname AS schema, c.relname AS name, c.relkind AS kind, pg_get_expr(c.relpartbound, c.oid) AS bound,
       pg_get_partition_constraintdef(c.oid) AS constraint
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE i.inhparent = to_regclass('timelines')
ORDER BY n.nspname, c.relname
"""

_BOUND: Final = re.compile(r"FOR VALUES WITH \(modulus (\d+), remainder (\d+)\)")


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _M32


def _mix(a: int, b: int, c: int) -> tuple[int, int, int]:
    a = (a - c) & _M32; a ^= _rot(c, 4); c = (c + b) & _M32  # noqa: E702 (Jenkins' mix, one line a step)
    b = (b - a) & _M32; b ^= _rot(a, 6); a = (a + c) & _M32  # noqa: E702
    c = (c - b) & _M32; c ^= _rot(b, 8); b = (b + a) & _M32  # noqa: E702
    a = (a - c) & _M32; a ^= _rot(c, 16); c = (c + b) & _M32  # noqa: E702
    b = (b - a) & _M32; b ^= _rot(a, 19); a = (a + c) & _M32  # noqa: E702
    c = (c - b) & _M32; c ^= _rot(b, 4); b = (b + a) & _M32  # noqa: E702
    return a, b, c


def _final(a: int, b: int, c: int) -> tuple[int, int, int]:
    c ^= b; c = (c - _rot(b, 14)) & _M32  # noqa: E702 (Jenkins' final)
    a ^= c; a = (a - _rot(c, 11)) & _M32  # noqa: E702
    b ^= a; b = (b - _rot(a, 25)) & _M32  # noqa: E702
    c ^= b; c = (c - _rot(b, 16)) & _M32  # noqa: E702
    a ^= c; a = (a - _rot(c, 4)) & _M32  # noqa: E702
    b ^= a; b = (b - _rot(a, 14)) & _M32  # noqa: E702
    c ^= b; c = (c - _rot(b, 24)) & _M32  # noqa: E702
    return a, b, c


def _hash_uint32_extended(k: int, seed: int) -> int:
    """hash_bytes_uint32_extended of src/common/hashfn.c."""
    a = b = c = (0x9E3779B9 + 4 + 3923095) & _M32
    if seed:
        a = (a + (seed >> 32)) & _M32
        b = (b + (seed & _M32)) & _M32
        a, b, c = _mix(a, b, c)
    a = (a + k) & _M32
    a, b, c = _final(a, b, c)
    return (b << 32) | c


def row_hash(key: int) -> int:
    """Postgres's hash of a row whose hash partition key is one bigint `key` (as an unsigned 64-bit number)."""
    if not -(2**63) <= key < 2**63:
        raise ValueError(f"{key} is not a bigint")
    low, high = key & _M32, (key >> 32) & _M32
    low ^= high if key >= 0 else (~high & _M32)  # hashint8extended: equal to hashint4's for small values
    return (_hash_uint32_extended(low, SEED) + _COMBINE) & _M64  # hash_combine64(0, h)


@dataclass(frozen=True, slots=True)
class Partition:
    schema: str
    name: str
    modulus: int
    remainder: int
    constraint: str  # pg_get_partition_constraintdef's text, which the home read checks before trusting the name


class Layout:
    """Hash partitions that hold every hash exactly once (moduli may differ, each a factor of the greatest, as
    after splitting one partition: docs/adr/0093)."""

    def __init__(self, partitions: tuple[Partition, ...]) -> None:
        self.partitions = partitions
        self.greatest = max(p.modulus for p in partitions)  # hash % greatest decides the partition
        slots: list[Partition | None] = [None] * self.greatest
        for p in partitions:
            for slot in range(p.remainder, self.greatest, p.modulus):
                slots[slot] = p
        self._slots = slots
        # readers come back: a dict probe instead of ~60 integer operations of row_hash
        self.of = lru_cache(maxsize=CACHED_USERS)(self._of)

    @staticmethod
    def parse(rows: Iterable[Mapping[str, Any]]) -> Layout | None:
        """The layout from LAYOUT's rows, or None when they are not one the api can name: no partitions, a
        partition that is itself partitioned, a bound that is not a hash bound, gaps or overlaps."""
        partitions = []
        for row in rows:
            found = _BOUND.fullmatch(row["bound"] or "")
            if row["kind"] != "r" or found is None or not row["constraint"]:
                return None
            partitions.append(Partition(row["schema"], row["name"], int(found[1]), int(found[2]), row["constraint"]))
        if not partitions:
            return None
        greatest = max(p.modulus for p in partitions)
        if greatest > MAX_MODULUS:
            return None
        covered = [0] * greatest
        for p in partitions:
            if p.modulus <= 0 or greatest % p.modulus or not 0 <= p.remainder < p.modulus:
                return None
            for slot in range(p.remainder, greatest, p.modulus):
                covered[slot] += 1
        if any(n != 1 for n in covered):
            return None
        return Layout(tuple(partitions))

    def _of(self, user: int) -> Partition:
        """The partition that holds `user`'s rows."""
        found = self._slots[row_hash(user) % self.greatest]
        assert found is not None  # parse leaves no slot uncovered
        return found
