"""Percentiles, medians of runs, pacing and time buckets. Pure: no I/O (tests/unit/test_bench_stats.py)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

QUANTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (the smallest value with at least q of the values at or below it). NaN when empty."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def summary(values: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99/max and the count of a sample (latencies in ms, say)."""
    out = {name: percentile(values, q) for name, q in QUANTILES.items()}
    out["max"] = max(values) if values else math.nan
    out["count"] = float(len(values))
    return out


def median_of(runs: Iterable[Mapping[str, float]], key: str) -> float:
    """Median over runs of one figure, ignoring runs where it is missing or NaN."""
    found = [r[key] for r in runs if key in r and not math.isnan(r[key])]
    return statistics.median(found) if found else math.nan


def medians(runs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per-key medians over runs (keys of the first run)."""
    return {key: median_of(runs, key) for key in (runs[0] if runs else {})}


def due(elapsed: float, rate: float, total: int) -> int:
    """Posts that should have been sent `elapsed` seconds into a paced run at `rate`/s (the first at 0 s)."""
    if elapsed < 0:
        return 0
    return min(total, math.floor(elapsed * rate) + 1)


def send_time(index: int, rate: float) -> float:
    """Seconds after the start at which post number `index` (0-based) is due."""
    return index / rate


def buckets(times: Iterable[float], start: float, width: float = 1.0) -> list[int]:
    """Counts of events per `width`-second bucket from `start` (events before it are dropped)."""
    counts: list[int] = []
    for t in times:
        if t < start:
            continue
        i = int((t - start) // width)
        if i >= len(counts):
            counts.extend([0] * (i + 1 - len(counts)))
        counts[i] += 1
    return counts


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else math.nan
