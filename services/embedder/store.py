"""Postgres adapter of the embedder: each function one statement on a connection in autocommit mode."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from services.core.embedding.protocol import Vectors
from services.core.embedding.vectors import to_stored
from services.embedder import sql

Conn = psycopg.Connection[Any]


def bodies(conn: Conn, ids: Sequence[int]) -> list[tuple[int, str]]:
    """The live posts among `ids`, with their bodies, by id."""
    return [(int(i), str(b)) for i, b in conn.execute(sql.BODIES, {"ids": list(ids)}).fetchall()]


def insert_vectors(conn: Conn, model: str, ids: Sequence[int], vectors: Vectors) -> int:
    """Rows written (posts deleted meanwhile and rows that exist already are skipped)."""
    if not ids:
        return 0
    cursor = conn.execute(sql.INSERT_VECTORS, {"model": model, "dimension": int(vectors.shape[1]),
                                               "ids": list(ids), "vectors": to_stored(vectors)})
    return cursor.rowcount


def tombstone(conn: Conn, ids: Sequence[int]) -> int:
    if not ids:
        return 0
    return conn.execute(sql.TOMBSTONE, {"ids": list(ids)}).rowcount


def ensure_model(conn: Conn, model: str) -> tuple[int, bool]:
    """The model's backfill position and whether a pass has covered every post (creating its row)."""
    conn.execute(sql.ENSURE_MODEL, {"model": model})
    row = conn.execute(sql.MODEL_STATE, {"model": model}).fetchone()
    assert row is not None
    return int(row[0]), row[1] is not None


def horizon(conn: Conn, settle: float) -> int:
    row = conn.execute(sql.HORIZON, {"settle": settle}).fetchone()
    return int(row[0]) if row else 0


def missing(conn: Conn, model: str, after: int, until: int, batch: int) -> list[tuple[int, str]]:
    rows = conn.execute(sql.MISSING, {"model": model, "after": after, "horizon": until, "batch": batch}).fetchall()
    return [(int(i), str(b)) for i, b in rows]


def restart(conn: Conn, model: str) -> None:
    conn.execute(sql.RESTART, {"model": model})


def advance(conn: Conn, model: str, position: int, complete: bool) -> None:
    conn.execute(sql.ADVANCE, {"model": model, "position": position, "complete": complete})


@dataclass(frozen=True, slots=True)
class Coverage:
    model: str
    live: int  # live posts
    embedded: int  # of them with a vector of the model
    oldest_missing: datetime | None  # created_at of the oldest live post without one
    position: int | None  # the backfill's (None: never run for the model)
    complete_at: datetime | None


def coverage(conn: Conn, model: str) -> Coverage:
    row = conn.execute(sql.COVERAGE, {"model": model}).fetchone()
    assert row is not None
    return Coverage(model, int(row[0]), int(row[1]), row[2], None if row[3] is None else int(row[3]), row[4])


def models(conn: Conn) -> list[str]:
    return [str(r[0]) for r in conn.execute(sql.MODELS).fetchall()]


def known_dimension(conn: Conn, model: str) -> int | None:
    """The length of the model's vectors written so far (None: none yet)."""
    row = conn.execute(sql.DIMENSION, {"model": model}).fetchone()
    return None if row is None else int(row[0])
