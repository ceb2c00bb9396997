"""The home read's statement priced part by part, and against a rewrite: database CPU per read under pgbench.

    .venv/bin/python -m bench.read_statement [--follows 50,500,5000] [--rounds 4] [--seconds 5] [--connections 8]
                                             [--variants design,rows,no-pulled,ids-first,bare]

bench.read_throughput's `design / bare` row says what the api's read statement (sql.HOME_ABOVE_FLOOR, its common
form, naming the reader's partition: docs/adr/0153) costs the database against the bare page; this bench says where
that cost goes. On bench.read_throughput's data (200 readers per --follows value, 4 celebrities among the followed),
pgbench runs each variant with --connections connections and the api's session settings (its generic plan), a
script per partition of timelines as bench.read_throughput's design row does, and the backends' CPU is read from
/proc; the variants alternate in each round (in reverse every other round), --rounds rounds of --seconds each. The
figures are database CPU per read and, per variant, the medians of its per-round ratios to `design` and to `bare`.

The variants, each derived from today's text when the bench runs, so that they follow the statement:
- design: the statement the api runs first;
- rows: its materialized rows alone (the `pushed` branch as a statement of its own: the reader's partition, each row
  checked against posts), same generic plan: what the design pays for the rows the bare page reads;
- no-pulled: the design with nothing pulled (the celebrities' branch an empty set): what the merge costs;
- ids-first: a rewrite that reads the materialized rows as ids only (the index of the reader's partition) and fetches
  their posts for the rows on the page, after the merge, not before it: fewer buffers, more executor nodes. Checked
  here to give the design's page for the first reader of each group (a row whose post was deleted would come back
  empty, `gone`, and the api would have to read the page again);
- bare: the floor app's page (bench/floor_app.py): its 20 ids, then each post by key, at Postgres's default plans.

`rows` and `no-pulled` are prices, not pages: they leave out what the page needs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.rows import dict_row

from bench import read_throughput
from bench.lib import closedloop, entry, infra
from bench.lib.cpumeter import CpuMeter
from services.api import partitions, sql
from services.api.db import session_options

Variant = Callable[[partitions.Partition], str]


def design(part: partitions.Partition) -> str:
    return sql.home_above_floor("newest", part.schema, part.name, part.constraint).decode()


def _between(text: str, start: str, end: str) -> tuple[int, int]:
    """Where the text from `start` up to (not including) `end` stands in `text`; each must be there once."""
    for marker in (start, end):
        if text.count(marker) != 1:
            raise ValueError(f"the statement no longer has exactly one {marker!r}: update bench/read_statement.py")
    first = text.index(start)
    return first, text.index(end, first)


def rows(part: partitions.Partition) -> str:
    text = design(part)
    first, last = _between(text, "pushed AS MATERIALIZED (", "), reach AS MATERIALIZED")
    body = text[first + len("pushed AS MATERIALIZED ("):last]
    if body.count("(SELECT low FROM me)") != 1:
        raise ValueError("the pushed branch no longer bounds its range by `me`: update bench/read_statement.py")
    return body.replace("(SELECT low FROM me)", "1")


def no_pulled(part: partitions.Partition) -> str:
    text = design(part)
    first, last = _between(text, "), pulled AS (", ")\nSELECT * FROM (")
    return (text[:first] + "), pulled AS (SELECT NULL::bigint AS id, NULL::bigint AS author_id, NULL::text AS body, "
            "NULL::timestamptz AS created_at WHERE false" + text[last:])


IDS_FIRST_PAGE = """SELECT page.floor, page.placed, page.again, page.id,
       coalesce(page.author_id, p.author_id) AS author_id, coalesce(page.body, p.body) AS body,
       coalesce(page.created_at, p.created_at) AS created_at,
       page.pushed AND p.author_id IS NULL AS gone
FROM (SELECT * FROM (
    SELECT floor, placed, again, NULL::bigint AS id, NULL::bigint AS author_id, NULL::text AS body,
           NULL::timestamptz AS created_at, false AS pushed FROM me
    UNION ALL SELECT NULL, NULL, NULL, id, NULL, NULL, NULL, true FROM pushed
    UNION ALL SELECT NULL, NULL, NULL, *, false FROM pulled OFFSET 0) merged
  ORDER BY id DESC NULLS FIRST LIMIT %(limit)s + 1) page
LEFT JOIN LATERAL (  -- OFFSET 0: `page.pushed` a one-time filter, no probe for the pulled rows
    SELECT author_id, body, created_at FROM posts WHERE id = page.id AND page.pushed AND deleted_at IS NULL OFFSET 0
) p ON true
ORDER BY page.id DESC NULLS FIRST
"""


def ids_first(part: partitions.Partition) -> str:
    text = design(part)
    first, last = _between(text, "pushed AS MATERIALIZED (", "), reach AS MATERIALIZED")
    pushed = (f'pushed AS MATERIALIZED (\n    SELECT t.post_id AS id FROM "{part.schema}"."{part.name}" t\n'
              "    WHERE t.user_id = %(user)s AND t.post_id < %(before)s AND t.post_id >= (SELECT low FROM me)\n"
              "    ORDER BY t.post_id DESC LIMIT %(limit)s\n")
    text = text[:first] + pushed + text[last:]
    first, _ = _between(text, ")\nSELECT * FROM (", "ORDER BY id DESC NULLS FIRST LIMIT %(limit)s + 1")
    return text[:first + 2] + IDS_FIRST_PAGE


VARIANTS: dict[str, Variant | None] = {"design": design, "rows": rows, "no-pulled": no_pulled, "ids-first": ids_first,
                                       "bare": None}


def scripts(variant: Variant | None, layout: partitions.Layout, group: read_throughput.Group) -> list[str]:
    """pgbench scripts of `variant` for `group`, a script per partition (read_throughput.partition_scripts); the
    bare page, one script for any reader of the group."""
    if variant is None:
        return [read_throughput.pgbench_script(read_throughput.BARE, group.first, group.last)]
    return read_throughput.partition_scripts(layout, group, lambda part: variant(part).encode())


def check_ids_first(url: str, layout: partitions.Layout, user: int) -> None:
    """The rewrite gives the design's page (and no row gone) for `user`'s first page."""
    params = {"user": user, "after": 0, "before": 2**63 - 1, "limit": 21}
    with psycopg.connect(url, row_factory=dict_row, options=session_options(30.0)) as conn:
        want = conn.execute(design(layout.of(user)).encode(), params).fetchall()
        got = conn.execute(ids_first(layout.of(user)).encode(), params).fetchall()
    if any(row.pop("gone") for row in got) or got != want:
        raise AssertionError(f"ids-first does not give the design's page for reader {user}")


def ratios(runs: dict[str, list[float]], to: str) -> dict[str, float]:
    return {name: statistics.median(x / y for x, y in zip(ms, runs[to], strict=True)) for name, ms in runs.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--follows", default="50,500,5000", help="authors each reader follows, comma-separated")
    parser.add_argument("--rounds", type=int, default=4, help="rounds, the variants alternating in each")
    parser.add_argument("--seconds", type=float, default=5.0, help="each pgbench run (the CPU is read over all "
                                                                    "but its first and last second)")
    parser.add_argument("--connections", type=int, default=8, help="pgbench's connections (the api's 2 x 4)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}; "
                                                                       "design and bare are always run")
    args = parser.parse_args()
    follows = [int(x) for x in str(args.follows).split(",") if x]
    asked = [v for v in str(args.variants).split(",") if v]
    unknown = sorted(set(asked) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    names = [v for v in VARIANTS if v in asked or v in ("design", "bare")]
    logs = infra.results_folder(None, "read-statement") / "logs"
    with infra.Resources(uuid.uuid4().hex[:6], logs) as res:
        url = res.database("reads")
        dbname = str(psycopg.conninfo.conninfo_to_dict(url)["dbname"])
        groups = read_throughput.seed(url, 200, follows)
        with psycopg.connect(url, row_factory=dict_row) as conn:
            layout = partitions.Layout.parse(conn.execute(partitions.LAYOUT).fetchall())
        assert layout is not None, "timelines is not hash-partitioned"
        if "ids-first" in names:
            for group in groups:
                check_ids_first(url, layout, group.first)
        print(f"{args.connections} pgbench connections, {args.rounds} rounds of {args.seconds:g} s; nproc "
              f"{os.cpu_count()}; database CPU per read, ms")
        summary: dict[int, Any] = {}
        for group in groups:
            texts = {name: scripts(VARIANTS[name], layout, group) for name in names}
            runs: dict[str, list[float]] = {name: [] for name in names}
            for i in range(args.rounds):
                for name in names if i % 2 == 0 else names[::-1]:
                    options = "" if VARIANTS[name] is None else session_options(30.0)
                    with CpuMeter(os.getpid(), dbname, window=(1.0, args.seconds - 1.0)) as cpu:
                        rate = closedloop.pgbench_tps(url, texts[name], args.connections, args.seconds, options)
                    runs[name].append(cpu.db / rate * 1000)
            to_design, to_bare = ratios(runs, "design"), ratios(runs, "bare")
            summary[group.follows] = to_design
            print(f"following {group.follows}:")
            for name in names:
                print(f"  {name:>10} {statistics.median(runs[name]):.4f} ms   / design {to_design[name]:.2f}   "
                      f"/ bare {to_bare[name]:.2f}   rounds {' '.join(f'{x:.4f}' for x in runs[name])}", flush=True)
    print(f"load average {entry.load_avg()}")
    return 0


if __name__ == "__main__":
    entry.run(main)
