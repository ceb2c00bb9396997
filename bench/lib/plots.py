"""PNG plots of a run (matplotlib, Agg backend): latency CDFs per source, throughput over time, idle load."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.lib.stats import buckets

COLORS = {"cdc": "tab:blue", "poll-1s": "tab:red", "poll-100ms": "tab:orange"}


def latency_cdf(samples: Mapping[str, Mapping[str, Sequence[float]]], path: Path) -> None:
    """samples: source -> rate -> latencies (ms, all runs pooled). One panel per rate, log x axis."""
    rates = sorted({r for by_rate in samples.values() for r in by_rate}, key=float)
    fig, axes = plt.subplots(1, len(rates), figsize=(6 * len(rates), 4.5), squeeze=False)
    for ax, rate in zip(axes[0], rates, strict=True):
        for source, by_rate in samples.items():
            values = sorted(by_rate.get(rate, []))
            if not values:
                continue
            ys = [(i + 1) / len(values) for i in range(len(values))]
            ax.plot(values, ys, label=f"{source} (n={len(values)})", color=COLORS.get(source))
        ax.set_xscale("log")
        ax.set_xlabel("commit -> visible in all followers' timelines (ms, log)")
        ax.set_ylabel("fraction of posts")
        ax.set_title(f"{rate} posts/s asked")
        for q in (0.5, 0.95, 0.99):
            ax.axhline(q, color="grey", linewidth=0.5, linestyle=":")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="best")
    fig.suptitle("End-to-end latency per source (CDF, all runs)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def throughput(series: Mapping[str, Mapping[str, Any]], rate: str, path: Path) -> None:
    """series: source -> {"commit_times": [...], "visible_times": [...]} of one run at `rate`."""
    sources = list(series)
    fig, axes = plt.subplots(len(sources), 1, figsize=(9, 2.6 * len(sources)), squeeze=False, sharex=True)
    for ax, source in zip(axes[:, 0], sources, strict=True):
        run = series[source]
        # the last bucket is a part of a second: left out, it would look like a drop
        committed, visible = buckets(run["commit_times"], 0.0)[:-1], buckets(run["visible_times"], 0.0)[:-1]
        ax.step(range(len(committed)), committed, where="post", label="committed/s", color="grey")
        ax.step(range(len(visible)), visible, where="post", label="visible/s", color=COLORS.get(source))
        ax.set_ylabel("posts/s")
        ax.set_title(f"{source}", loc="left")
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper right")
    axes[-1, 0].set_xlabel("seconds since the first post")
    fig.suptitle(f"Throughput over time at {rate} posts/s asked (first run)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def idle_load(load: Mapping[str, Mapping[str, Mapping[str, float]]], path: Path) -> None:
    """What each source costs the database with nothing to do: transactions/s, rows read/s, backend CPU %."""
    sources = [s for s in load if "idle" in load[s]]
    panels = (("xact_commit_per_s", 1.0, "transactions/s in the bench database"),
              ("tup_returned_per_s", 1.0, "rows returned/s (scans)"),
              ("source_backend_cpu_s_per_s", 100.0, "CPU % of the source's Postgres backend"))
    fig, axes = plt.subplots(1, len(panels), figsize=(14, 3.8))
    colors = [COLORS.get(s, "tab:grey") for s in sources]
    for ax, (key, scale, title) in zip(axes, panels, strict=True):
        ax.bar(sources, [scale * load[s]["idle"].get(key, 0.0) for s in sources], color=colors)
        ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("Idle phase: no posts written (CPU is counted in 10 ms clock ticks)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


KIND_COLORS = {"sql": "tab:blue", "http": "tab:green", "floor": "tab:orange"}


def capacity(steps: Sequence[Mapping[str, Any]], knees: Mapping[str, int], path: Path) -> None:
    """bench/capacity.py: offered vs achieved and delivered rate, and p99 against the offered rate, per writer kind."""
    fig, (rates, p99) = plt.subplots(1, 2, figsize=(13, 4.8))
    offered_all = sorted({s["offered"] for s in steps}) or [1]
    rates.plot(offered_all, offered_all, color="grey", linewidth=0.7, linestyle=":", label="= offered")
    for kind in dict.fromkeys(s["kind"] for s in steps):
        mine = sorted((s for s in steps if s["kind"] == kind), key=lambda s: s["offered"])
        offered = [s["offered"] for s in mine]
        color = KIND_COLORS.get(kind)
        rates.plot(offered, [s["achieved"] for s in mine], marker="o", linestyle="--", color=color,
                   label=f"{kind}: written")
        rates.plot(offered, [s["delivered"] for s in mine], marker="s", color=color, label=f"{kind}: delivered")
        p99.plot(offered, [s["p99"] for s in mine], marker="o", color=color,
                 label=f"{kind} (knee {knees.get(kind, 0):,}/s)")
    rates.set_xlabel("offered posts/s")
    rates.set_ylabel("posts/s")
    rates.set_title("written (commits) and delivered (visible in all timelines) per second")
    p99.axhline(1000, color="grey", linewidth=0.7, linestyle=":")
    p99.set_yscale("log")
    p99.set_xlabel("offered posts/s")
    p99.set_ylabel("commit -> visible p99 (ms, log)")
    p99.set_title("p99 (the knee needs < 1 s and a backlog that does not grow)")
    rates.set_yscale("log")
    for ax in (rates, p99):
        ax.set_xscale("log")
        ax.set_xticks(offered_all, [f"{x:,}" for x in offered_all])
        ax.minorticks_off()
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
