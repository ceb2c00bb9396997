"""EXPLAIN plans as the plan tests read them: the JSON of one statement's plan, and its nodes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.sql import SQL, Composable

Plan = dict[str, Any]

PARTITION = re.compile(r"timelines_p\d\d")  # a hash partition of timelines (db/init/012)


@contextmanager
def loaded(url: str, scenario: str, *then: str) -> Iterator[psycopg.Connection[dict[str, Any]]]:
    """An autocommit connection to `url` (rows as dicts) after running a plan test's `scenario`, then each statement of
    `then` (ANALYZE, VACUUM ANALYZE: what the planner is to know of the data)."""
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        conn.execute(scenario)
        for statement in then:
            conn.execute(statement)
        yield conn


def explain(db: psycopg.Connection[dict[str, Any]], statement: Composable | str | bytes,
            params: Mapping[str, Any], *, analyze: bool = False) -> Plan:
    """The root node of the statement's plan; with `analyze` the statement runs (the caller rolls it back)."""
    options = b"ANALYZE, TIMING OFF, FORMAT JSON" if analyze else b"FORMAT JSON"
    text = statement if isinstance(statement, bytes) else (
        SQL(statement) if isinstance(statement, str) else statement).as_bytes(db)
    row = db.execute(b"EXPLAIN (" + options + b") " + text, params).fetchone()
    assert row is not None
    return root(row["QUERY PLAN"])


def root(query_plan: object) -> Plan:
    """The root node of an EXPLAIN (FORMAT JSON) result's "QUERY PLAN" value (text, or JSON already decoded)."""
    decoded: Any = json.loads(query_plan) if isinstance(query_plan, str) else query_plan
    plan: Plan = decoded[0]["Plan"]
    return plan


def nodes(node: Plan) -> list[Plan]:
    """`node` and every node under it."""
    return [node, *[n for child in node.get("Plans", []) for n in nodes(child)]]


def scans(node: Plan) -> list[Plan]:
    """The scans (Seq Scan, Index Scan, Bitmap Heap Scan, ...) among `node` and the nodes under it."""
    return [n for n in nodes(node) if "Scan" in n["Node Type"]]


def is_partition(relation: str | None) -> bool:
    return relation is not None and PARTITION.fullmatch(relation) is not None
