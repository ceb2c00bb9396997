"""The three existing benchmark scripts, run as subprocesses with their own (smaller) flags, parsed.

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

from bench.lib import parse

ROOT = Path(__file__).resolve().parents[2]

# script -> (file, flags in quick mode, flags in full mode, runs in quick mode, runs in full mode)
PLAN: dict[str, tuple[str, list[str], list[str], int, int]] = {
    "relay": ("relay_throughput.py", ["--events", "5000", "--pairs", "3", "--lag-seconds", "3"],
              ["--events", "20000", "--pairs", "5", "--lag-seconds", "8"], 1, 1),
    "fanout": ("fanout_throughput.py", ["--runs", "3", "--posts", "15", "--small-events", "200"],
               ["--runs", "5", "--posts", "40", "--small-events", "500"], 1, 1),
    "api": ("api_latency.py", ["--requests", "80", "--rounds", "3", "--seconds", "2", "--pairs", "1"],
            ["--requests", "200", "--rounds", "5", "--seconds", "3", "--pairs", "3"], 1, 2),
}
ESTIMATE = {"relay": (25.0, 80.0), "fanout": (12.0, 30.0), "api": (30.0, 60.0)}  # seconds per run: quick, full
TIMEOUT = (150.0, 240.0)  # seconds one run may take (quick, full): then SIGINT, so that it still cleans up
CLEANUP = 60.0  # seconds a script may take to clean up after its SIGINT: then SIGKILL


def command(name: str, quick: bool) -> list[str]:
    file, quick_flags, full_flags, _, _ = PLAN[name]
    return [sys.executable, str(ROOT / "bench" / file), *(quick_flags if quick else full_flags)]


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


def run(name: str, quick: bool, log: Path) -> dict[str, Any]:
    """One run: the parsed figures, plus `error` when the script failed."""
    proc = subprocess.Popen(command(name, quick), cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    timeout = TIMEOUT[0 if quick else 1]
    out, timed_out = "", False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        out = _interrupt(proc)
    except KeyboardInterrupt:
        out = _interrupt(proc)
        raise
    finally:
        with open(log, "a") as f:  # also what an interrupted script printed
            f.write(f"$ {' '.join(command(name, quick))}\n{out}\n")
    figures = parse.PARSERS[name](out)
    if timed_out:
        figures["error"] = f"timed out after {timeout:.0f} s (stopped with SIGINT)"
    elif proc.returncode != 0:
        figures["error"] = f"exit {proc.returncode}: {out.strip().splitlines()[-1] if out.strip() else ''}"
    return figures
