"""Which partition of timelines holds a user's rows (services/api/partitions.py, docs/adr/0153): Postgres's hash of
a bigint key, and the layouts the api names or leaves to the parent. The hash against the server's own routing:
tests/integration/api/test_partition_names.py."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.api import partitions, store
from services.api.partitions import Layout, row_hash
from testkit.clock import Clock

# hashint8extended(key, HASH_PARTITION_SEED) as PostgreSQL 15 answers it (SELECT i, hashint8extended(i,
# 8816678312871386365)), as signed 64-bit numbers; the row hash adds hash_combine64's constant.
SERVER = {
    0: -4403592609991167795,
    1: 5968994663651403477,
    7: 1708571371176205364,
    -1: -5017072347659237694,
    2**32: 5968994663651403477,  # hashint8 folds the high half into the low: equal to 1's
    -(2**63): -6050265599104649060,
    2**63 - 1: 4938542303000433043,
}


@pytest.mark.parametrize("key", sorted(SERVER))
def test_the_row_hash_is_postgres_hashint8extended_combined(key: int) -> None:
    assert row_hash(key) == (SERVER[key] + 0x49A0F4DD15E5A8E3) % 2**64


def test_keys_outside_bigint_are_refused() -> None:
    with pytest.raises(ValueError):
        row_hash(2**63)


def _rows(*bounds: tuple[int, int], kind: str = "r") -> list[dict[str, Any]]:
    return [{"schema": "public", "name": f"t_{m}_{r}", "kind": kind,
             "bound": f"FOR VALUES WITH (modulus {m}, remainder {r})",
             "constraint": f"satisfies_hash_partition('1'::oid, {m}, {r}, user_id)"} for m, r in bounds]


def test_thirty_two_partitions_are_a_layout_and_each_user_lands_by_hash_modulo() -> None:
    layout = Layout.parse(_rows(*((32, r) for r in range(32))))
    assert layout is not None and layout.greatest == 32
    for user in range(1, 500):
        assert layout.of(user).name == f"t_32_{row_hash(user) % 32}"


@given(st.integers(-(2**63), 2**63 - 1))
def test_a_split_partition_sends_each_user_to_the_half_its_hash_names(user: int) -> None:
    """Modulus 64 next to 32 (one partition split in two, docs/adr/0093): the remainder modulo each partition's own
    modulus decides."""
    layout = Layout.parse(_rows(*((32, r) for r in range(32) if r != 5), (64, 5), (64, 37)))
    assert layout is not None
    found = layout.of(user)
    assert row_hash(user) % found.modulus == found.remainder


@pytest.mark.parametrize("rows", [
    [],  # not partitioned
    _rows(*((32, r) for r in range(31))),  # a remainder no partition holds
    _rows(*((32, r) for r in range(32)), (64, 5)),  # two partitions hold one remainder
    _rows(*((32, r) for r in range(32)), kind="p"),  # partitions partitioned again
    _rows((3, 0), (3, 1), (3, 2), (4, 0)),  # moduli that do not divide the greatest
    _rows((1, 0), (partitions.MAX_MODULUS * 2, 0)),  # more slots than are worth naming
    [{"schema": "public", "name": "t", "kind": "r", "bound": "FOR VALUES FROM (1) TO (9)", "constraint": "x"}],
    [{"schema": "public", "name": "t", "kind": "r", "bound": "DEFAULT", "constraint": "x"}],
    [{"schema": "public", "name": "t", "kind": "r", "bound": None, "constraint": None}],
], ids=["none", "gap", "overlap", "sub-partitioned", "moduli", "too-many", "range", "default", "no-bound"])
def test_anything_but_a_complete_set_of_hash_partitions_is_read_through_the_parent(
        rows: list[dict[str, Any]]) -> None:
    assert Layout.parse(rows) is None


class _Catalog:
    """Stands in for an api connection: answers partitions.LAYOUT with `rows`, or fails as a database would."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows, self.reads, self.fail = rows, 0, False

    async def execute(self, query: Any, params: Any = None) -> _Catalog:
        assert query == partitions.LAYOUT
        self.reads += 1
        if self.fail:
            raise psycopg.OperationalError("the server closed the connection")
        return self

    async def fetchall(self) -> list[dict[str, Any]]:
        return self.rows


def test_the_layout_is_read_once_a_refresh_forgotten_when_wrong_and_a_failed_read_leaves_the_parent() -> None:
    """store.TimelinePartitions: one catalog read per refresh period; a wrong name sends reads to the parent (None)
    until the next refresh; a catalog read that fails does not fail the home read (None: through the parent)."""
    catalog, clock = _Catalog(_rows(*((32, r) for r in range(32)))), Clock(0.0)
    names = store.TimelinePartitions(refresh=60, clock=clock)

    async def of(user: int) -> str | None:
        found = await names.of(catalog, user)  # type: ignore[arg-type]
        return None if found is None else found.name

    async def scenario() -> None:
        assert await of(7) == f"t_32_{row_hash(7) % 32}" and await of(8) is not None
        assert catalog.reads == 1
        part = (await names.of(catalog, 7))  # type: ignore[arg-type]
        assert part is not None
        names.wrong(part, "constraint changed")
        clock.now = 59
        assert await of(7) is None and catalog.reads == 1  # through the parent until the refresh is due
        clock.now = 60
        assert await of(7) is not None and catalog.reads == 2
        catalog.fail, clock.now = True, 120
        assert await of(7) is None and catalog.reads == 3  # no exception: the read goes on through the parent
        catalog.fail, clock.now = False, 150
        assert await of(7) is None and catalog.reads == 3  # not before the next refresh
        clock.now = 180
        assert await of(7) is not None and catalog.reads == 4

    asyncio.run(scenario())
