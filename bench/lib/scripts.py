"""The benchmark scripts, run as subprocesses with their own (smaller) flags; each writes its figures with `--json`
(bench/lib/figures.py), which `run` reads back.

They clean up their own database and AMQP names in `finally` blocks. Each runs in a session of its own, so that a
signal reaches it only through `run`: when run_all is interrupted (Ctrl-C, or SIGTERM to run_all alone), the running
script gets exactly one SIGINT and is waited for, never killed first (a second SIGINT would interrupt its clean-up;
none at all would leave it running after run_all).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.lib import figures

ROOT = Path(__file__).resolve().parents[2]

# script -> (module, flags in quick mode, flags in full mode, runs in quick mode, runs in full mode)
PLAN: dict[str, tuple[str, list[str], list[str], int, int]] = {
    "relay": ("bench.relay_throughput", ["--events", "5000", "--pairs", "3", "--lag-seconds", "3"],
              ["--events", "20000", "--pairs", "5", "--lag-seconds", "8"], 1, 1),
    "fanout": ("bench.fanout_throughput", ["--runs", "3", "--posts", "15", "--small-events", "200"],
               ["--runs", "5", "--posts", "40", "--small-events", "500"], 1, 1),
    "api": ("bench.api_latency", ["--requests", "80", "--rounds", "3", "--seconds", "2", "--pairs", "1"],
            ["--requests", "200", "--rounds", "5", "--seconds", "3", "--pairs", "3"], 1, 2),
    "capacity": ("bench.capacity", ["--quick", "--steps", "250,1000", "--seconds", "3", "--drain", "10"],
                 ["--steps", "250,500,1000,2000", "--seconds", "8", "--drain", "20"], 1, 1),
    "notify": ("bench.notify_latency", ["--seconds", "3", "--drain", "20"], ["--seconds", "10", "--drain", "30"], 1, 1),
}
# the figures run_all's report reads (bench/lib/report.py), per script: a run that does not write one names it missing
FIGURES: dict[str, tuple[str, ...]] = {
    "relay": ("ratio", "ratio_min", "ratio_max", "relay_events_per_s", "ceiling_events_per_s",
              "relay_cpu_us_per_event", "ceiling_cpu_us_per_event", "lag_p50_ms", "lag_p99_ms"),
    "fanout": ("ratio_small", "worker_small_rows_per_s", "ceiling_small_rows_per_s", "ratio_big",
               "worker_big_rows_per_s", "ceiling_big_rows_per_s", "ratio_big_per_post", "per_post_rows_per_s",
               "small_events_per_s"),
    "api": ("p99_ratio_big_small", "post_p99_ms_10_followers", "post_p99_ms_100k_followers", "api_posts_per_s",
            "pgbench_tps", "throughput_ratio", "timeline_first_p99_ms"),
    "capacity": ("knee_sql_posts_per_s", "knee_http_posts_per_s", "max_delivered_sql_posts_per_s",
                 "max_delivered_http_posts_per_s"),
    "notify": ("notify_posts_per_s", "notify_p50_ms", "notify_p99_ms", "notify_missing"),
}
# seconds per run: quick, full
ESTIMATE = {"relay": (25.0, 80.0), "fanout": (25.0, 60.0), "api": (30.0, 60.0), "capacity": (70.0, 200.0),
            "notify": (30.0, 45.0)}
TIMEOUT = (150.0, 240.0)  # seconds one run may take (quick, full): then SIGINT, so that it still cleans up
TIMEOUTS = {"capacity": (240.0, 480.0)}  # scripts that take longer than TIMEOUT
# scripts with a results folder of their own (--out): run_all's subfolder
OUT = {"capacity", "fanout", "relay", "api", "notify"}
CLEANUP = 60.0  # seconds a script may take to clean up after its SIGINT: then SIGKILL


def command(name: str, quick: bool, figures_file: Path, out: Path | None = None) -> list[str]:
    module, quick_flags, full_flags, _, _ = PLAN[name]
    extra = ["--out", str(out / name)] if out is not None and name in OUT else []
    return [sys.executable, "-m", module, *(quick_flags if quick else full_flags), *extra, "--json", str(figures_file)]


def runs(name: str, quick: bool) -> int:
    return PLAN[name][3] if quick else PLAN[name][4]


def _interrupt(proc: subprocess.Popen[str]) -> str:
    """One SIGINT (its `finally` drops its database and queues), a minute to clean up, then SIGKILL. Its output."""
    proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=CLEANUP)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return str(out)


def run(name: str, quick: bool, log: Path, out: Path | None = None) -> dict[str, Any]:
    """One run: the figures it wrote (`missing`: those it did not), plus `error` when the script failed. A script in
    OUT writes its own results to `out`/<name>; the figures go next to the log, `<log>.json`."""
    figures_file = log.with_suffix(".json")
    figures_file.unlink(missing_ok=True)  # a run that fails before writing its figures must not show the last one's
    cmd = command(name, quick, figures_file, out)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    timeout = TIMEOUTS.get(name, TIMEOUT)[0 if quick else 1]
    text, timed_out = "", False
    try:
        text, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        text = _interrupt(proc)
    except KeyboardInterrupt:
        text = _interrupt(proc)
        raise
    finally:
        with open(log, "a") as f:  # also what an interrupted script printed
            f.write(f"$ {' '.join(cmd)}\n{text}\n")
    found = figures.read(figures_file, FIGURES[name])
    if timed_out:
        found["error"] = f"timed out after {timeout:.0f} s (stopped with SIGINT)"
    elif proc.returncode != 0:
        found["error"] = f"exit {proc.returncode}: {text.strip().splitlines()[-1] if text.strip() else ''}"
    return found
