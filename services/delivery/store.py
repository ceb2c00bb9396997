"""Postgres adapter of the delivery worker: load a delivery, record a try's outcome, take from a target's rate."""

from __future__ import annotations

from psycopg_pool import ConnectionPool

from services.delivery import sql
from services.delivery.payload import Delivery


class Store:
    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool

    def load(self, delivery_id: int) -> Delivery | None:
        with self._pool.connection() as conn:
            row = conn.execute(sql.LOAD, {"id": delivery_id}).fetchone()
        return None if row is None else Delivery.from_row(row)  # type: ignore[arg-type]

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

    def take(self, target: str, rate: float, burst: int) -> float:
        """Seconds to wait before trying `target` (0: go), counting this try when it may go."""
        if rate <= 0:
            return 0.0
        interval = 1.0 / rate
        params = {"target": target, "interval": interval, "tolerance": (burst - 1) * interval}
        with self._pool.connection() as conn:
            if conn.execute(sql.TAKE, params).fetchone() is not None:
                return 0.0
            row = conn.execute(sql.WAIT, params).fetchone()
        return float(row["wait"]) if row is not None else interval  # type: ignore[call-overload]
