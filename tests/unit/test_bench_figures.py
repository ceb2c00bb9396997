"""The figures each benchmark writes with --json (its figures_of), their file (bench/lib/figures.py), and run_all
reading them back from a script it runs (bench/lib/scripts.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench import api_latency, capacity, delivery_throughput, fanout_throughput, notify_latency, relay_throughput
from bench.lib import figures, scripts


def test_written_figures_are_read_back_with_nothing_missing(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "figures.json"
    figures.write(path, {"ratio": 0.8, "count": 3}, meta={"events": 100})
    assert figures.read(path, ["ratio", "count"]) == {"ratio": 0.8, "count": 3.0, "missing": []}
    assert json.loads(path.read_text())["meta"] == {"events": 100}
    figures.write(None, {"ratio": 0.8})  # no --json: nothing written, nothing fails


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '{"figures": [1]}', '{"ratio": 0.8}',
                                  '{"figures": {"ratio": "0.8", "count": true, "lag": NaN, "p99": Infinity}}'])
def test_an_absent_unreadable_or_wrong_file_names_every_figure_missing(tmp_path: Path, text: str) -> None:
    path = tmp_path / "figures.json"
    path.write_text(text)
    assert figures.read(path, ["ratio", "count", "lag", "p99"]) == {"missing": ["ratio", "count", "lag", "p99"]}
    assert figures.read(tmp_path / "absent.json", ["ratio"]) == {"missing": ["ratio"]}


def test_the_relay_figures_are_medians_of_the_pairs_and_the_lag_run() -> None:
    relays = [relay_throughput.Run(900.0, 30e-6, {}, 1.9), relay_throughput.Run(800.0, 40e-6, {}, 1.9),
              relay_throughput.Run(1000.0, 20e-6, {}, 1.9)]
    ceilings = [relay_throughput.Run(1000.0, 20e-6, {}, 1.9)] * 3
    found = relay_throughput.figures_of(relays, ceilings, (1.5, 3.0, 0))
    assert set(scripts.FIGURES["relay"]) <= set(found)
    assert (found["ratio"], found["ratio_min"], found["ratio_max"]) == (0.9, 0.8, 1.0)
    assert found["relay_events_per_s"] == 900.0 and found["relay_cpu_us_per_event"] == pytest.approx(30.0)
    assert (found["lag_p50_ms"], found["lag_p99_ms"], found["lag_missing"]) == (1.5, 3.0, 0.0)
    assert "lag_p50_ms" not in relay_throughput.figures_of(relays, ceilings, None)  # --lag-seconds 0


def test_the_fanout_figures_name_the_first_worker_side_and_each_group_size_against_it() -> None:
    def run(worker: float, grouped: float, ceiling: float, per_post: float) -> dict[str, float]:
        return {"worker_rows_per_s": worker, "worker_g10_rows_per_s": grouped, "set_based_rows_per_s": ceiling,
                "per_post_rows_per_s": per_post, "worker_events_per_s": worker / 11,
                "worker_g10_events_per_s": grouped / 11}

    runs = {fanout_throughput.SMALL: [run(500, 700, 1000, 0), run(400, 800, 1000, 0), run(600, 600, 1000, 0)],
            fanout_throughput.BIG: [run(900, 900, 1000, 800)] * 3}
    found = fanout_throughput.figures_of(runs, [1, 10])
    assert set(scripts.FIGURES["fanout"]) <= set(found)
    assert (found["ratio_small"], found["worker_small_rows_per_s"], found["ceiling_small_rows_per_s"]) == (
        0.5, 500, 1000)
    assert (found["ratio_big"], found["ratio_big_per_post"]) == (0.9, 1.125)
    assert found["groups_10_ratio_small"] == 0.7
    assert found["groups_10_over_first_small"] == 1.4  # per run 1.4, 2.0, 1.0: the median
    assert "groups_10_ratio_small" not in fanout_throughput.figures_of(runs, [1])


def test_the_capacity_figures_are_the_knee_and_the_most_delivered_per_writer_kind() -> None:
    steps = [{"kind": "sql", "delivered": 998.0}, {"kind": "sql", "delivered": 1012.0},
             {"kind": "http", "delivered": 204.0}]
    found = capacity.figures_of(steps, {"sql": 1000, "http": 0})
    assert set(scripts.FIGURES["capacity"]) <= set(found)
    assert found == {"knee_sql_posts_per_s": 1000.0, "max_delivered_sql_posts_per_s": 1012.0,
                     "knee_http_posts_per_s": 0.0, "max_delivered_http_posts_per_s": 204.0}
    assert capacity.figures_of([], {"sql": 0}) == {"knee_sql_posts_per_s": 0.0, "max_delivered_sql_posts_per_s": 0.0}


def test_the_notify_and_api_throughput_figures() -> None:
    found = notify_latency.figures_of({"posts_per_s": 99.4, "p50_ms": 26.2, "p99_ms": 1254.4, "missing": 29})
    assert found == {"notify_posts_per_s": 99.4, "notify_p50_ms": 26.2, "notify_p99_ms": 1254.4,
                     "notify_missing": 29.0}
    api = api_latency.throughput_figures({"api_posts_per_s": 291.2, "pgbench_tps": 4023.7, "api_over_pgbench": 0.07,
                                          "runs": {"api": [291.2]}})
    assert api == {"api_posts_per_s": 291.2, "pgbench_tps": 4023.7, "throughput_ratio": 0.07}


STAND_IN = """import argparse, json, sys
from pathlib import Path
parser = argparse.ArgumentParser()
parser.add_argument("--json", type=Path)
parser.add_argument("--exit", type=int, default=0)
args = parser.parse_args()
if args.exit == 0:
    args.json.write_text(json.dumps({"figures": {"notify_p50_ms": 8.0, "notify_p99_ms": 38.0}}))
print("stand-in done")
sys.exit(args.exit)
"""


def test_run_all_reads_what_a_script_wrote_and_never_a_former_runs_figures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "walfeed_bench_stand_in.py").write_text(STAND_IN)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    log = tmp_path / "notify_benchmark.log"
    for exit_code, expected in ((0, {"notify_p50_ms": 8.0, "notify_p99_ms": 38.0}), (3, {})):
        monkeypatch.setitem(scripts.PLAN, "notify", ("walfeed_bench_stand_in", ["--exit", str(exit_code)], [], 1, 1))
        found = scripts.run("notify", True, log)
        assert {k: v for k, v in found.items() if k not in ("missing", "error")} == expected
        assert set(found["missing"]) == set(scripts.FIGURES["notify"]) - set(expected)
        assert ("error" in found) == (exit_code != 0)
    assert found["error"] == "exit 3: stand-in done"
    assert scripts.command("relay", False, tmp_path / "f.json")[-2:] == ["--json", str(tmp_path / "f.json")]
    assert sys.executable in scripts.command("relay", False, tmp_path / "f.json")


def test_the_delivery_figures_are_medians_of_the_pairs() -> None:
    found = delivery_throughput.figures_of([(600.0, 800.0, 1.2), (700.0, 1000.0, 1.0), (500.0, 1000.0, 1.4)])
    assert found == {"ratio": 0.7, "worker_per_s": 600.0, "client_per_s": 1000.0, "worker_cpu_ms_per_delivery": 1.2}
