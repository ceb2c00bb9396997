"""The home read's generic plan on the partitioned timelines against the same statement naming the reader's partition.

    .venv/bin/python -m bench.read_partition [--follows 500,5000] [--rounds 6] [--seconds 3]

The api runs sql.HOME_ABOVE_FLOOR as a generic plan (services/api/db.py session_options): planned once without the
reader's id, so the plan holds all 32 partitions of timelines (db/init/012) and prunes them when it starts. This
measures what that costs the database, side by side: pgbench runs the statement as the api does, and the same text
with `timelines` replaced by the reader's own partition, one pgbench script per partition (a reader of each), 8
connections, the two alternating, `--rounds` runs each; medians. Data: bench.read_throughput's (200 readers per
--follows value, 4 celebrities among the followed). Nothing of walfeed runs but Postgres.
"""

from __future__ import annotations

import argparse
import statistics
import uuid

import psycopg

from bench import read_throughput
from bench.lib import closedloop, infra
from services.api.db import session_options


def scripts(url: str, group: read_throughput.Group, direct: bool) -> list[str]:
    """One pgbench script per partition holding readers of the group: the statement for one reader of it."""
    design = read_throughput.design_statement()
    assert design.count("FROM timelines t") == 1, design
    with psycopg.connect(url) as conn:
        readers = conn.execute("SELECT DISTINCT ON (tableoid) tableoid::regclass::text, user_id FROM timelines "
                               "WHERE user_id BETWEEN %s AND %s ORDER BY tableoid, user_id",
                               (group.first, group.last)).fetchall()
    out = []
    for partition, user in readers:
        text = design.replace("FROM timelines t", f"FROM {partition} t") if direct else design
        out.append(read_throughput.pgbench_script(text, user, user))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--follows", default="500,5000", help="authors each reader follows, comma-separated")
    parser.add_argument("--rounds", type=int, default=6, help="runs of each statement, alternating")
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each run")
    args = parser.parse_args()
    follows = [int(x) for x in str(args.follows).split(",") if x]
    logs = infra.results_folder(None, "read-partition") / "logs"
    with infra.Resources(uuid.uuid4().hex[:6], logs) as res:
        url = res.database("reads")
        groups = read_throughput.seed(url, 200, follows)
        options = session_options(30.0)
        print(f"{'follows':>7} {'partitions':>10} {'generic reads/s':>16} {'named reads/s':>14} {'named/generic':>14}")
        for group in groups:
            texts = {"generic": scripts(url, group, False), "named": scripts(url, group, True)}
            runs: dict[str, list[float]] = {kind: [] for kind in texts}
            for i in range(args.rounds):
                for kind in ("generic", "named") if i % 2 == 0 else ("named", "generic"):
                    runs[kind].append(closedloop.pgbench_tps(url, texts[kind], 8, args.seconds, options))
            generic, named = (statistics.median(runs[k]) for k in ("generic", "named"))
            spread = ", ".join(f"{k} {[round(x) for x in v]}" for k, v in runs.items())
            print(f"{group.follows:>7} {len(texts['named']):>10} {generic:>16.0f} {named:>14.0f} "
                  f"{named / generic:>14.2f}   runs {spread}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
