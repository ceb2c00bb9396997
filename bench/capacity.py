"""Capacity: offered load in steps through the real pipeline, up to the knee.

    .venv/bin/python -m bench.capacity [--steps 250,350,...,4000] [--seconds 30] [--drain 60]
                                       [--kinds sql,http,floor] [--quick] [--out DIR] [--json FILE]

One pipeline per writer kind runs side by side, each on its own database (seeded: 100 authors with 10 followers
each, and a history), AMQP prefix and slot, with the real processes: `walfeed relay` and 2 `walfeed worker`s each,
and for the HTTP kind also `walfeed api` (the floor kind the floor app). Writer kinds:

- sql: paced writers issuing the API's own statements directly (bench/lib/e2e.py write_post);
- http: paced writers posting through the api (POST /v1/posts, bearer tokens of the seeded authors): one event loop
  driving keep-alive connections (bench/lib/httpload.py). Commit time is when the 201 response arrives;
- floor: the same HTTP writer against the framework's floor (bench/floor_app.py: a minimal FastAPI route running
  the api's one-statement insert of a post and its outbox row, no auth, the api's server, processes and pool size):
  what any FastAPI app doing this work keeps of the pipeline's capacity on this machine, the ceiling of the HTTP
  kind that does not depend on walfeed's api.

Steps are interleaved (sql 250, http 250, sql 500, ...). Each step writes at its offered rate for --seconds, then
waits up to --drain seconds for its posts to become visible. Per step: achieved write rate; delivered rate (posts
that became visible during the writing phase, per second); commit -> visible in all timelines p50/p99
(bench/lib/e2e.py's watcher, exact to one watcher period); the backlog at the end of the writing phase (fan-out
queue depth, and posts committed but not yet visible); CPU per component over the writing phase (api, relay,
workers, the bench database's Postgres backends, RabbitMQ, this load generator), in cores; the floor kind's app is
counted as its api.

The knee, per writer kind, is the highest offered rate at which the step and every lower one were sustained:
writers reached 95% of the offered rate without errors, p99 < 1 s, every post visible by the drain deadline, and
the backlog did not grow, meaning: over the second half of the writing phase, the backlog (posts committed and
not yet visible) grew by at most 5% of the posts committed in that half (bench/lib/knee.py). A kind runs no step
above its first one not sustained: its knee is known, and a step that did not drain would count its backlog again.
The default steps grow by 1.4 times, so that two kinds' knees are compared to within that factor.

Worker and api settings (WALFEED_WORKER_*, WALFEED_API_*) set in this process's environment reach the processes
unchanged (e.g. WALFEED_WORKER_BATCH_SIZE); the bench's defaults apply only where none is set.
Writes report.md, report.json and capacity.png to bench/results/<timestamp>-capacity/ (or --out). Everything it
creates is removed at the end, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import resource
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.lib import dbload, e2e, entry, figures, httpload, infra, knee, proc, stats
from bench.lib.report import fmt
from bench.run_all import AUTHORS, PER_AUTHOR
from bench.run_all import process_env as pipeline_env
from services.api.config import ApiSettings
from testkit.processes import Process, free_port
from testkit.waiting import eventually

# Each step 1.4 times the one before: a knee ratio of 0.7 is one a grid of doublings cannot show (it has 0.5 and 1).
STEPS = (250, 350, 500, 700, 1000, 1400, 2000, 2800, 4000)
QUICK_STEPS = (250, 1000, 2000)
KINDS = ("sql", "http", "floor")
WORKERS = 2
# 100 authors write up to 4,000 posts/s: the api's per-user write limit (120 a minute) would answer 429. Its
# processes and pools are the api's own defaults (one worker per CPU, ADR 0111).
API_DEFAULTS = {"WALFEED_API_WRITE_LIMIT": "0"}
COMPONENTS = ("api", "relay", "workers", "postgres", "rabbitmq", "loadgen")


def env_for(url: str, prefix: str, slot: str) -> dict[str, str]:
    """The processes' environment: the bench's names, and its defaults for the settings not set in ours."""
    return infra.passthrough({**pipeline_env(url, prefix, slot, infra.SOURCES[0]), **API_DEFAULTS})


def sql_writers(rate: int) -> int:
    """SQL writer threads (connections): each commit waits for its WAL flush, several ms on a busy machine, so one
    per 100 posts/s offered, at least 2 and at most 32 (run_all's one per 250 could not write 250 posts/s here)."""
    return max(2, min(32, -(-rate // 100)))


def connections(rate: int) -> int:
    """Keep-alive connections of the HTTP writer: each waits for its response (10-50 ms on a busy 2-core machine)
    before it takes the next post, so one per 20 posts/s offered, at least 4 and at most 128."""
    return max(4, min(128, -(-rate // 20)))


@dataclass
class Pipeline:
    """One writer kind's database, names and processes."""

    kind: str
    url: str
    prefix: str
    procs: dict[str, list[Process]] = field(default_factory=dict)
    port: int = 0  # the api's (http kind) or the floor app's (floor kind)

    @property
    def dbname(self) -> str:
        return str(psycopg.conninfo.conninfo_to_dict(self.url)["dbname"])

    def write(self, rate: int) -> e2e.Write | None:
        """The HTTP writer (one thread, many connections) for the http and floor kinds; the SQL writers' default
        otherwise."""
        if self.kind == "sql":
            return None
        return functools.partial(httpload.writer, self.port, connections(rate), self.kind == "floor")

    def writers(self, rate: int) -> int:
        return sql_writers(rate) if self.kind == "sql" else 1


def start(res: infra.Resources, kind: str, url: str) -> Pipeline:
    pipe = Pipeline(kind, url, res.prefix(kind))
    env = env_for(url, pipe.prefix, res.slot(url, kind))
    pipe.procs["workers"] = [res.start(f"worker-{kind}-{i}", ["worker"], env) for i in range(WORKERS)]
    pipe.procs["relay"] = [res.start(f"relay-{kind}", ["relay"], env)]
    if kind == "http":
        pipe.port = free_port()
        pipe.procs["api"] = [res.start("api", ["api", "--port", str(pipe.port)], env)]
        with httpx.Client(base_url=f"http://127.0.0.1:{pipe.port}", timeout=5) as client:
            auth = {"Authorization": f"Bearer {infra.token(1)}"}
            eventually(lambda: client.get("/v1/users/1", headers=auth).status_code == 200, timeout=60,
                       what="the api to answer an authenticated request")
    elif kind == "floor":  # the api's defaults: a process per CPU, a pool of WALFEED_API_POOL_MAX each
        pipe.port = free_port()
        api = ApiSettings.from_env(env)
        pipe.procs["api"] = [res.start("floor", ["--port", str(pipe.port), "--workers", str(api.workers),
                                                 "--pool", str(api.pool_max)], env, module="bench.floor_app")]
        with httpx.Client(base_url=f"http://127.0.0.1:{pipe.port}", timeout=5) as client:
            eventually(lambda: client.get("/page", params={"user": 1}).status_code == 200, timeout=60,
                       what="the floor app to answer")
    return pipe


class Meter:
    """CPU seconds per component of one pipeline between `start()` and `stop()`, in cores (CPU s per s): each of
    its processes' components (`Pipeline.procs`, with their descendants), postgres, rabbitmq and loadgen."""

    def __init__(self, pipe: Pipeline, admin: psycopg.Connection[Any]) -> None:
        self.pipe, self.admin = pipe, admin

    def _take(self) -> tuple[float, proc.Processes, tuple[int, int]]:
        seen: proc.Processes = {}
        for component, procs in self.pipe.procs.items():
            for p in procs:
                seen.update(proc.tree(p.pid, component))
        backends = dbload.take(self.admin, self.pipe.dbname).cpu  # its walsender and every client backend
        seen.update({pid: (f"postgres:{app or 'unnamed'}", cpu) for pid, (app, cpu) in backends.items()})
        seen.update({pid: ("rabbitmq", cpu) for pid, (_name, cpu) in proc.by_name({"beam.smp"}).items()})
        own = resource.getrusage(resource.RUSAGE_SELF)
        seen[os.getpid()] = ("loadgen", own.ru_utime + own.ru_stime)
        return time.monotonic(), seen, proc.machine_ticks()

    def start(self) -> None:
        self.before = self._take()

    def stop(self) -> dict[str, Any]:
        after = self._take()
        seconds = max(after[0] - self.before[0], 1e-9)
        spent = proc.spent(self.before[1], after[1])
        backends = {c.removeprefix("postgres:"): v / seconds for c, v in spent.items() if c.startswith("postgres:")}
        spent["postgres"] = sum(v for c, v in spent.items() if c.startswith("postgres:"))
        out: dict[str, Any] = {c: spent.get(c, 0.0) / seconds
                               for c in (*self.pipe.procs, "postgres", "rabbitmq", "loadgen")}
        out["machine"] = proc.cores_busy(self.before[2], after[2])
        out["postgres_by_application"] = backends  # whose backends the database's CPU went to
        return out


def step(pipe: Pipeline, admin: psycopg.Connection[Any], rate: int, seconds: float, drain: float,
         listener: bool = False) -> dict[str, Any]:
    meter = Meter(pipe, admin)
    at_end: dict[str, Any] = {}

    def written() -> None:
        at_end["cpu"] = meter.stop()
        at_end["queue"] = infra.queue_depth(pipe.prefix)

    meter.start()
    # No commit -> broker listener unless asked: a step reports commit -> visible only, and a second queue with its
    # consumer loads the broker and this process (the CPU the pipeline shares) for a figure nobody reads.
    amqp = (infra.AMQP, pipe.prefix) if listener else None
    run = e2e.run(pipe.url, amqp, AUTHORS, PER_AUTHOR + 1, rate, seconds, drain,
                  writers=pipe.writers(rate), write=pipe.write(rate), at_end=written)
    figures = stats.summary(run.latencies_ms)
    result: dict[str, Any] = {
        "kind": pipe.kind, "offered": rate, "achieved": run.achieved, "p50": figures["p50"], "p99": figures["p99"],
        "max": figures["max"], "errors": run.errors, "unfinished": run.unfinished, "pending_at_end": run.pending_at_end,
        "queue_at_end": at_end.get("queue", math.nan), "cpu": at_end.get("cpu", {}),
        "watcher_period_ms": run.watcher_period_ms, "watcher_probes_per_s": run.watcher_probes_per_s,
        **knee.backlog_growth(run.commit_times, run.visible_times, run.wrote_seconds),
    }
    result["failures"] = knee.failures(result)
    return result


def line(s: Mapping[str, Any]) -> str:
    cpu = s["cpu"]
    return (f"| {s['kind']} | {s['offered']:,} | {fmt(s['achieved'], 0)} | {fmt(s['delivered'], 0)} | "
            f"{fmt(s['p50'])} | {fmt(s['p99'])} | {s['pending_at_end']:,} | {fmt(s['growth'], 0)} | "
            f"{fmt(s['queue_at_end'], 0)} | {s['errors']} | "
            + " | ".join(fmt(cpu.get(c), 2) for c in (*COMPONENTS, "machine"))
            + f" | {'; '.join(s['failures']) or 'sustained'} |")


HEADER = ["| writers | offered/s | achieved/s | delivered/s | p50 ms | p99 ms | backlog at end (posts) | "
          "backlog growth, 2nd half | fan-out queue at end | errors | "
          + " | ".join(f"CPU {c}" for c in COMPONENTS) + " | machine busy | verdict |", "|---" * 18 + "|"]


def markdown(result: Mapping[str, Any]) -> str:
    meta = result["meta"]
    out = [f"# walfeed capacity ({meta['mode']})", "",
           f"Machine: {meta['nproc']} cores, load average {meta['load_before']} before, {meta['load_after']} after. "
           f"{meta['authors']} authors x {meta['followers']} followers; {meta['workers']} workers per pipeline; "
           f"{meta['seconds']:.0f} s per step, drain up to {meta['drain']:.0f} s. Worker/api settings from the "
           f"environment: {meta['settings'] or 'none (defaults)'}.", "",
           *HEADER, *[line(s) for s in result["steps"]], "",
           "CPU in cores over the writing phase. postgres: the backends of the pipeline's database and its walsender "
           "(not the server's background processes); rabbitmq: the whole broker, which other users of this machine "
           "share; loadgen: this process (writers, watcher, broker listener).", ""]
    for kind, k in result["knee"].items():
        out.append(f"- knee, {kind.upper()} writers: {k:,} posts/s")
    for key, what in (("http_over_sql", "HTTP (the api) knee / SQL knee"),
                      ("floor_over_sql", "floor app knee / SQL knee"),
                      ("http_over_floor", "HTTP (the api) knee / floor app knee")):
        if result.get(key) is not None:
            out.append(f"- {what}, same run: {result[key]:.2f}")
    for kind, skipped in result["skipped"].items():
        why = "the run was aborted" if result.get("aborted") else "a lower step was not sustained"
        out.append(f"- {kind}: steps {', '.join(map(str, skipped))} not run: {why}")
    if result.get("aborted"):
        out.append(f"- aborted ({result['aborted']}): the knee counts only the steps above")
    out += ["", f"A step is sustained when the writers reach {knee.ACHIEVED_SHARE:.0%} of the offered rate without "
            f"errors, p99 < {knee.P99_LIMIT_MS:,.0f} ms, every post is visible by the drain deadline, and the backlog "
            f"(posts committed, not yet visible) grows over the second half of the writing phase by at most "
            f"{knee.GROWTH_SHARE:.0%} of the posts committed in that half. The knee is the highest offered rate "
            "sustained together with every lower one."]
    return "\n".join(out) + "\n"


def settings() -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(("WALFEED_WORKER_",
                                                                                        "WALFEED_API_")))


def figures_of(results: list[dict[str, Any]], knees: Mapping[str, int]) -> dict[str, float]:
    """What --json writes (bench/lib/figures.py): per writer kind that ran, its knee and the most posts/s delivered
    by any of its steps."""
    out: dict[str, float] = {}
    for kind, at in knees.items():
        out[f"knee_{kind}_posts_per_s"] = float(at)
        out[f"max_delivered_{kind}_posts_per_s"] = max((float(s["delivered"]) for s in results if s["kind"] == kind),
                                                       default=0.0)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", help=f"offered rates, posts/s, comma-separated (default "
                                          f"{','.join(map(str, STEPS))})")
    parser.add_argument("--seconds", type=float, help="writing time per step (default 30; --quick 3)")
    parser.add_argument("--drain", type=float, help="seconds a step waits for its posts (default 60; --quick 15)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="writer kinds, comma-separated: sql, http, floor "
                                                                  "(default: all three)")
    parser.add_argument("--quick", action="store_true", help="steps 250,1000,2000 of 3 s each")
    parser.add_argument("--out", type=Path, help="results folder (default bench/results/<timestamp>-capacity)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file (bench/lib/figures.py)")
    parser.add_argument("--listener", action="store_true",
                        help="also consume every post.created from the events exchange, as the steps did before "
                             "the batch worker's tuning (its load on the broker and this process, measured)")
    args = parser.parse_args()
    steps = [int(x) for x in args.steps.split(",")] if args.steps else list(QUICK_STEPS if args.quick else STEPS)
    seconds = args.seconds or (3.0 if args.quick else 30.0)
    drain = args.drain or (15.0 if args.quick else 60.0)
    kinds = [k for k in args.kinds.split(",") if k]
    if not steps or not set(kinds) <= set(KINDS) or not kinds:
        parser.error(f"--kinds takes {', '.join(KINDS)}; --steps at least one rate")
    out = infra.results_folder(args.out, "capacity")
    meta: dict[str, Any] = {"mode": "quick" if args.quick else "full", "nproc": os.cpu_count(),
                            "load_before": entry.load_avg(), "steps": steps, "seconds": seconds, "drain": drain,
                            "authors": AUTHORS, "followers": PER_AUTHOR, "workers": WORKERS, "settings": settings(),
                            "listener": args.listener}
    results: list[dict[str, Any]] = []
    skipped: dict[str, list[int]] = {}
    aborted = ""
    with infra.Resources(uuid.uuid4().hex[:6], out / "logs") as res, infra.admin() as admin:
        urls = res.seeded_databases(kinds, AUTHORS, PER_AUTHOR)
        pipes = [start(res, kind, urls[kind]) for kind in kinds]
        for pipe in pipes:  # warm-up: connections, prepared statements, the first messages
            e2e.run(pipe.url, (infra.AMQP, pipe.prefix), AUTHORS, PER_AUTHOR + 1, rate=50,
                    seconds=1.0, drain=60.0, writers=1, write=pipe.write(50))
        for rate, pipe in ((r, p) for r in steps for p in pipes):
            if pipe.kind in skipped or aborted:
                skipped.setdefault(pipe.kind, []).append(rate)
                continue
            print(f"{pipe.kind} writers, {rate:,} posts/s for {seconds:.0f} s", file=sys.stderr, flush=True)
            try:
                s = step(pipe, admin, rate, seconds, drain, args.listener)
            except Exception as exc:  # Postgres or the broker went away (a shared machine): report what was measured
                aborted = f"{pipe.kind} writers at {rate:,} posts/s: {exc!r}"
                print(f"aborted: {aborted}", file=sys.stderr, flush=True)
                skipped.setdefault(pipe.kind, []).append(rate)
                continue
            results.append(s)
            print(f"    {line(s)}", file=sys.stderr, flush=True)
            if knee.failures(s):  # its knee is known; a step that did not drain would count its backlog again
                skipped[pipe.kind] = []
    skipped = {k: v for k, v in skipped.items() if v}
    meta["load_after"] = entry.load_avg()
    knees = {k: knee.knee([s for s in results if s["kind"] == k]) for k in kinds}
    result = {"meta": meta, "steps": results, "skipped": skipped, "knee": knees, "aborted": aborted,
              "http_over_sql": knee.ratio(knees), "floor_over_sql": knee.ratio(knees, "floor"),
              "http_over_floor": knee.ratio(knees, "http", "floor")}
    (out / "report.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "report.md").write_text(markdown(result))
    from bench.lib import plots  # matplotlib is the bench extra: needed only here

    plots.capacity(results, knees, out / "capacity.png")
    print(markdown(result))
    found = figures_of(results, knees)
    figures.write(args.json, found, report=str(out / "report.json"))
    for kind in kinds:
        print(f"max delivered, {kind.upper()} writers: {found[f'max_delivered_{kind}_posts_per_s']:,.0f} posts/s")
    print(f"results in {out}")
    return 1 if aborted else 0


if __name__ == "__main__":
    entry.run(main)
