"""Postgres adapter of the delivery worker: load a delivery taking a try from its target's rate, record the try's
outcome."""

from __future__ import annotations

from psycopg_pool import ConnectionPool

from services.delivery import sql
from services.delivery.payload import Delivery


class Store:
    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool

    def load(self, delivery_id: int, rate: float, burst: int) -> tuple[Delivery, bool] | None:
        """The delivery, and whether a try was taken from its target's rate (`rate` tries/s, `burst` at once; a
        rate of 0 is no limit) if it is to be tried now; None when there is no such delivery."""
        interval = 1.0 / rate if rate > 0 else None
        params = {"id": delivery_id, "interval": interval, "tolerance": (burst - 1) * (interval or 0.0)}
        with self._pool.connection() as conn:
            row = conn.execute(sql.LOAD, params).fetchone()
        if row is None:
            return None
        return Delivery.from_row(row), bool(row["taken"])  # type: ignore[arg-type, call-overload]

    def record(self, delivery_id: int, status: str, *, attempts: int, failed: bool, code: int | None = None,
               error: str | None = None, excerpt: str | None = None, delay: float | None = None,
               disable: str | None = None) -> None:
        with self._pool.connection() as conn:
            conn.execute(sql.RECORD, {"id": delivery_id, "status": status, "attempts": attempts, "code": code,
                                      "error": error, "excerpt": excerpt, "delay": delay, "failed": failed,
                                      "disable": disable})

    def withdraw(self, delivery_id: int) -> None:
        with self._pool.connection() as conn:
            conn.execute(sql.WITHDRAW, {"id": delivery_id})

    def wait(self, target: str, rate: float, burst: int) -> float:
        """Over the limit: seconds until `target` may be tried again."""
        interval = 1.0 / rate
        with self._pool.connection() as conn:
            row = conn.execute(sql.WAIT, {"target": target, "tolerance": (burst - 1) * interval}).fetchone()
        return float(row["wait"]) if row is not None else interval  # type: ignore[call-overload]
