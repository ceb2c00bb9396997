"""The system benchmark: end-to-end latency and database load per event source, and the ratios of the
relay, worker and API benchmarks against their ceilings, in one command, with a report and plots.

    .venv/bin/python -m bench.run_all [--quick] [--out bench/results/<timestamp>] [--skip-scripts]

1. For each source (CDC relay; polling outbox at 1 s and 100 ms intervals) in its own database and AMQP prefix,
   with the same worker processes: an idle phase (no posts; what the source costs when nothing happens), then
   paced writers at 100 and 1,000 posts/s, measuring post commit -> rows in all followers' timelines
   (bench/lib/e2e.py) and the database load of the same phase (bench/lib/dbload.py). Repeated --reps times,
   sources interleaved within each repetition; medians over repetitions.
2. bench/relay_throughput.py, fanout_throughput.py, api_latency.py, capacity.py and notify_latency.py as
   subprocesses (bench/lib/scripts.py), each writing its figures with --json (bench/lib/figures.py), read back:
   relay / bare publisher, fan-out / bare SQL, API posts / pgbench,
   POST p99 100k / 10 followers; the capacity knee and the most posts/s delivered, per writer kind (its own report
   and plot in the capacity/ subfolder); mention -> webhook received p50/p99 at 100 posts/s (notify/).
3. report.json, report.md, samples.json and PNG plots in the results folder.

Full mode: ~17 minutes on a 2-core machine; --quick: ~6 minutes. Everything it creates is removed at the end,
also on Ctrl-C. Needs matplotlib in the venv (the `bench` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.lib import dbload, e2e, entry, infra, report, scripts, stats
from bench.lib.progress import Progress

AUTHORS, PER_AUTHOR = 100, 10  # each author followed by 10 distinct users: 11 timeline rows per post (own row)
WORKERS, WORKER_THREADS = 2, 2  # worker processes x handler threads, the same for every source


def writers_for(rate: int) -> int:
    """Writer threads (connections): one commit waits for its WAL flush, so 1,000/s needs several."""
    return max(1, min(4, -(-rate // 250)))


@dataclass(frozen=True)
class Mode:
    name: str
    rates: tuple[int, ...]
    seconds: float  # writing time per latency run
    reps: int
    idle: float
    drain: float  # seconds a run waits for its last posts to become visible


QUICK = Mode("quick", (100, 1000), 4.0, 1, 8.0, 20.0)
FULL = Mode("full", (100, 1000), 8.0, 3, 20.0, 40.0)
START_COST = 6.0  # seconds to start a source's processes and warm it up


WORKER_RATE = 300.0  # posts/s the workers fan out on a busy 2-core machine (for the ETA only)


def run_estimate(mode: Mode, rate: int) -> float:
    """Seconds of one latency run: writing, then the workers' backlog when the rate is above what they do."""
    backlog = mode.seconds * max(0.0, rate - WORKER_RATE) / WORKER_RATE
    return mode.seconds + 2.0 + min(backlog, mode.drain)


def plan(mode: Mode, sources: tuple[infra.Source, ...], with_scripts: bool) -> list[tuple[str, float]]:
    steps: list[tuple[str, float]] = [("setup: databases, prefixes, slot", 8.0)]
    for rep in range(mode.reps):
        for source in sources:
            steps.append((f"run {rep + 1}/{mode.reps} {source.name}: start + warm-up", START_COST))
            if rep == 0:
                steps.append((f"{source.name}: idle {mode.idle:.0f}s", mode.idle + STATS_SETTLE + 1.0))
            steps += [(f"run {rep + 1}/{mode.reps} {source.name}: {r} posts/s", run_estimate(mode, r))
                      for r in mode.rates]
    if with_scripts:
        quick = mode is QUICK
        for name in scripts.PLAN:
            for i in range(scripts.runs(name, quick)):
                steps.append((f"{name} benchmark, run {i + 1}", scripts.ESTIMATE[name][0 if quick else 1]))
    steps.append(("report and plots", 5.0))
    return steps


STATS_SETTLE = 11.0  # s: idle backends flush their pg_stat counters up to 10 s late (PGSTAT_IDLE_INTERVAL)
NOTES = [
    "Writes: direct SQL with the API's statements (services/api/sql.py), one autocommit transaction per post; "
    "commit time taken client-side when the statement returns.",
    f"Visible: the post's rows in timelines for its author and all {PER_AUTHOR} followers (the API would show it "
    "at once: its read path merges posts whose fan-out is not decided yet). Resolution: one watcher period (~5 ms).",
    f"At 1,000 posts/s the workers ({WORKERS} processes x {WORKER_THREADS} threads on the shared "
    f"{os.cpu_count()} cores) may fan out fewer posts than are written: the end-to-end figures then measure their "
    "backlog; 'to broker' is the source alone.",
    "Database load: pg_stat_database of the bench database (pg_stat_statements needs a server restart) and "
    "/proc CPU of its backends; the source backend is the relay's walsender or the poller's connection. "
    "Rates phases include the writers, the watcher and the workers, the same for every source. Rows read per "
    "table: pg_stat_user_tables/_indexes of the same phases (their two snapshots add ~1,350 catalog rows each "
    "to tup_returned).",
]


def settle(url: str) -> None:
    """Before the idle phase: vacuum what the warm-up left (no autovacuum inside the window) and let the
    counters of the idle connections reach pg_stat_database first."""
    with psycopg.connect(url, autocommit=True, application_name="walfeed-bench") as conn:
        conn.execute("VACUUM (ANALYZE)")
    time.sleep(STATS_SETTLE)  # waiting out the statistics collector's flush delay


def process_env(url: str, prefix: str, slot: str, source: infra.Source) -> dict[str, str]:
    return {"WALFEED_DATABASE_URL": url, "WALFEED_AMQP_URL": infra.AMQP, "WALFEED_AMQP_PREFIX": prefix,
            "WALFEED_SLOT": slot, "WALFEED_RELAY_METRICS_PORT": "0", "WALFEED_WORKER_METRICS_PORT": "0",
            "WALFEED_WORKER_CONCURRENCY": str(WORKER_THREADS), "WALFEED_LOG_LEVEL": "WARNING", **source.env}


class Bench:
    def __init__(self, mode: Mode, out: Path, res: infra.Resources, progress: Progress) -> None:
        self.mode, self.out, self.res, self.progress = mode, out, res, progress
        self.e2e: dict[str, dict[str, list[dict[str, float]]]] = {}
        self.samples: dict[str, dict[str, list[float]]] = {}
        self.series: dict[str, dict[str, dict[str, list[float]]]] = {}
        self.load: dict[str, dict[str, list[dict[str, float]]]] = {}
        self.tables: dict[str, dict[str, dict[str, dict[str, float]]]] = {}  # source -> phase -> table -> rates

    def source_rep(self, source: infra.Source, url: str, prefix: str, slot: str, rep: int) -> None:
        self.progress.start(f"run {rep + 1}/{self.mode.reps} {source.name}: start + warm-up")
        env = process_env(url, prefix, slot, source)
        workers = [self.res.start(f"worker-{source.name}-{i}", ["worker"], env) for i in range(WORKERS)]
        relay = self.res.start(f"relay-{source.name}", ["relay", "--source", source.kind], env)
        dbname = url.split("dbname=")[1].split()[0]
        try:
            warm = e2e.run(url, (infra.AMQP, prefix), AUTHORS, PER_AUTHOR + 1, rate=50, seconds=1.0,
                           drain=60.0, writers=1)
            if warm.unfinished:
                raise RuntimeError(f"{source.name}: warm-up posts not visible after 60 s; see {self.out}/logs")
            with infra.admin() as admin, psycopg.connect(url, autocommit=True, application_name="walfeed-bench-admin",
                                                          prepare_threshold=None) as local:
                if rep == 0:
                    self.progress.start(f"{source.name}: idle {self.mode.idle:.0f}s")
                    settle(url)
                    before, cpu = dbload.take(admin, dbname), dbload.cpu_seconds(relay.pid) or 0.0
                    time.sleep(self.mode.idle)  # the idle phase itself: nothing is written
                    self.record_load(source, "idle", admin, dbname, before, relay.pid, cpu)
                for rate in self.mode.rates:
                    self.progress.start(f"run {rep + 1}/{self.mode.reps} {source.name}: {rate} posts/s")
                    tables = dbload.scans(local)
                    before, cpu = dbload.take(admin, dbname), dbload.cpu_seconds(relay.pid) or 0.0
                    run = e2e.run(url, (infra.AMQP, prefix), AUTHORS, PER_AUTHOR + 1, rate,
                                  self.mode.seconds, self.mode.drain, writers=writers_for(rate))
                    self.record_load(source, f"{rate}/s", admin, dbname, before, relay.pid, cpu)
                    if rep == 0:
                        seconds = time.monotonic() - before.at
                        self.tables.setdefault(source.name, {})[f"{rate}/s"] = dbload.scan_delta(
                            tables, dbload.scans(local), seconds, top=3)
                    self.record_run(source, rate, run, first=rep == 0)
        finally:
            self.res.stop(relay)
            for w in workers:
                self.res.stop(w)

    def record_load(self, source: infra.Source, phase: str, admin: Any, dbname: str, before: dbload.Snapshot,
                    pid: int, cpu_before: float) -> None:
        d = dbload.delta(before, dbload.take(admin, dbname), source.apps)
        d["source_process_cpu_s_per_s"] = ((dbload.cpu_seconds(pid) or cpu_before) - cpu_before) / d["seconds"]
        self.load.setdefault(source.name, {}).setdefault(phase, []).append(d)

    def record_run(self, source: infra.Source, rate: int, run: e2e.Run, first: bool) -> None:
        figures = stats.summary(run.latencies_ms)
        figures.update({f"broker_{k}": v for k, v in stats.summary(run.to_broker_ms).items() if k != "count"})
        figures.update(achieved=run.achieved, unfinished=float(run.unfinished),
                       watcher_period_ms=run.watcher_period_ms)
        self.e2e.setdefault(source.name, {}).setdefault(str(rate), []).append(figures)
        self.samples.setdefault(source.name, {}).setdefault(str(rate), []).extend(run.latencies_ms)
        if first:
            self.series.setdefault(source.name, {})[str(rate)] = {"commit_times": run.commit_times,
                                                                  "visible_times": run.visible_times}
        self.progress.note(f"achieved {run.achieved:,.0f} posts/s, p50 {figures['p50']:.1f} ms, "
                           f"p99 {figures['p99']:.1f} ms, not visible {run.unfinished}; to broker p50 "
                           f"{figures['broker_p50']:.1f} ms, p99 {figures['broker_p99']:.1f} ms")


def run_scripts(quick: bool, out: Path, progress: Progress) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for name in scripts.PLAN:
        runs = []
        for i in range(scripts.runs(name, quick)):
            progress.start(f"{name} benchmark, run {i + 1}")
            figures = scripts.run(name, quick, out / "logs" / f"{name}_benchmark.log", out)
            if figures["missing"] or "error" in figures:
                progress.note(f"{name}: missing {figures['missing']} {figures.get('error', '')}")
            runs.append(figures)
            if "timed out" in figures.get("error", ""):
                break  # a hung script hangs again: keep the total time bounded
        results[name] = {"runs": runs, "median": report.script_medians(runs)}
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a ~5-minute smoke version")
    parser.add_argument("--out", type=Path, help="results folder (default bench/results/<timestamp>)")
    parser.add_argument("--reps", type=int, help="repetitions of the latency runs (quick 1, full 3)")
    parser.add_argument("--skip-scripts", action="store_true", help="latency and load only")
    args = parser.parse_args()
    mode = QUICK if args.quick else FULL
    if args.reps:
        mode = Mode(mode.name, mode.rates, mode.seconds, args.reps, mode.idle, mode.drain)
    out = infra.results_folder(args.out)
    sources = infra.SOURCES
    progress = Progress(plan(mode, sources, not args.skip_scripts))
    meta: dict[str, Any] = {"mode": mode.name, "nproc": os.cpu_count(), "load_before": entry.load_avg(),
                            "reps": mode.reps, "seconds_per_run": mode.seconds, "idle_seconds": mode.idle,
                            "authors": AUTHORS, "followers_per_author": PER_AUTHOR, "workers": WORKERS,
                            "worker_threads": WORKER_THREADS, "writes": "direct SQL, the API's statements"}
    tag = uuid.uuid4().hex[:6]
    with infra.Resources(tag, out / "logs") as res:
        progress.start("setup: databases, prefixes, slot")
        urls = res.seeded_databases([s.name for s in sources], AUTHORS, PER_AUTHOR)
        names = {s.name: (res.prefix(s.name), res.slot(urls[s.name], s.name) if s.kind == "cdc" else "unused")
                 for s in sources}
        bench = Bench(mode, out, res, progress)
        for rep in range(mode.reps):
            for source in sources:
                prefix, slot = names[source.name]
                bench.source_rep(source, urls[source.name], prefix, slot, rep)
    ratios = {} if args.skip_scripts else run_scripts(mode is QUICK, out, progress)
    progress.start("report and plots")
    from bench.lib import plots  # matplotlib is the bench extra: needed only here

    meta.update(load_after=entry.load_avg(), duration_s=progress.elapsed())
    load = {s: {p: stats.medians(v) for p, v in by.items()} for s, by in bench.load.items()}
    result: dict[str, Any] = {
        "meta": meta,
        "e2e": {s: {r: {"runs": runs, "median": stats.medians(runs)} for r, runs in by.items()}
                for s, by in bench.e2e.items()},
        "load": load,
        "tables": bench.tables,
        "scripts": ratios,
        "ratios": report.ratio_rows(ratios),
        "notes": [*report.run_notes(bench.e2e, mode.drain), *NOTES],
    }
    (out / "report.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "report.md").write_text(report.markdown(result))
    (out / "samples.json").write_text(json.dumps({"latencies_ms": bench.samples, "series": bench.series}))
    plots.latency_cdf(bench.samples, out / "latency_cdf.png")
    for rate in mode.rates:
        plots.throughput({s: by[str(rate)] for s, by in bench.series.items() if str(rate) in by}, str(rate),
                         out / f"throughput_{rate}.png")
    plots.idle_load(load, out / "idle_load.png")
    print(report.markdown(result))
    print(f"\nresults in {out} ({progress.elapsed() / 60:.1f} minutes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    entry.run(main)
