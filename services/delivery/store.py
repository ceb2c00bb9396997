"""Postgres adapter of the delivery worker: load a batch of deliveries taking their tries from their targets'
rates, record the tries' outcomes, each in one statement."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from psycopg_pool import ConnectionPool

from services.delivery import sql
from services.delivery.budget import Taken
from services.delivery.payload import Delivery
from services.delivery.policy import EXCERPT_BYTES, bounded
from services.delivery.processing import Record


class Store:
    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool

    def load_many(self, delivery_ids: Sequence[int], rate: float,
                  burst: int) -> dict[int, tuple[Delivery, bool]]:
        """The deliveries found, each with whether a try was taken from its target's rate (`rate` tries/s, `burst`
        at once; a rate of 0 is no limit) if it is to be tried now. One statement per round: a target takes one
        try per statement (sql.LOAD), so a batch with k deliveries to one target takes k rounds for those."""
        interval = 1.0 / rate if rate > 0 else None
        found: dict[int, tuple[Delivery, bool]] = {}
        left = list(dict.fromkeys(delivery_ids))
        with self._pool.connection() as conn:
            while left:
                rows = conn.execute(sql.LOAD, {"ids": left, "interval": interval,
                                               "tolerance": (burst - 1) * (interval or 0.0)}).fetchall()
                left = []
                for row in rows:
                    if row["deferred"]:  # type: ignore[call-overload]
                        left.append(row["id"])  # type: ignore[call-overload]
                    else:
                        found[row["id"]] = (Delivery.from_row(row), bool(row["taken"]))  # type: ignore[arg-type, call-overload]
        return found

    def record_many(self, records: Sequence[Record]) -> None:
        if not records:
            return
        with self._pool.connection() as conn:
            conn.execute(sql.RECORD, {
                "ids": [r.delivery_id for r in records], "statuses": [r.status for r in records],
                "attempts": [r.attempts for r in records], "codes": [r.code for r in records],
                "errors": [bounded(r.error) for r in records],
                "excerpts": [bounded(r.excerpt, EXCERPT_BYTES) for r in records],
                "delays": [r.delay for r in records], "failed": [r.failed for r in records],
                "disable": [bounded(r.disable) for r in records]})

    def withdraw(self, delivery_id: int) -> None:
        with self._pool.connection() as conn:
            conn.execute(sql.WITHDRAW, {"id": delivery_id})

    def wait(self, target: str, rate: float, burst: int) -> float:
        """Over the limit: seconds until `target` may be tried again."""
        interval = 1.0 / rate
        with self._pool.connection() as conn:
            row = conn.execute(sql.WAIT, {"target": target, "tolerance": (burst - 1) * interval}).fetchone()
        return float(row["wait"]) if row is not None else interval  # type: ignore[call-overload]

    def take_hosts(self, asked: Mapping[str, int], window: float) -> dict[str, Taken]:
        """Count `asked` tries per host in the hosts' current windows (sql.HOST_BUDGET); each host's count after."""
        hosts = sorted(asked)
        with self._pool.connection() as conn:
            rows = conn.execute(sql.HOST_BUDGET, {"hosts": hosts, "counts": [asked[h] for h in hosts],
                                                  "window": window}).fetchall()
        return {r["host"]: Taken(int(r["hits"]), float(r["left"])) for r in rows}  # type: ignore[call-overload]
