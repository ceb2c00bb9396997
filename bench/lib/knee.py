"""bench/capacity.py's verdicts: the backlog of a step, whether a step is sustained, and the knee. Pure
(tests/unit/test_bench_capacity.py).

The backlog at time t is the number of posts committed by t and not visible in all their timelines by t: whatever
is in the outbox, the relay, the broker's queues or the workers. A step is *sustained* when all of these hold:

- the writers achieved at least ACHIEVED_SHARE of the offered rate, without a failed write;
- commit -> visible p99 is under P99_LIMIT_MS;
- the backlog does not grow: over the second half of the writing phase it grows by at most GROWTH_SHARE of the
  posts committed in that half (a pipeline that keeps up delivers what is written, give or take the posts in
  flight; one that does not falls behind by a fixed share of everything written);
- every post of the step became visible before the drain deadline.

The knee is the highest offered rate at which the step and every lower step were sustained (0 if the first was not).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any

ACHIEVED_SHARE = 0.95
P99_LIMIT_MS = 1000.0
GROWTH_SHARE = 0.05


def backlog_at(commit_times: Sequence[float], visible_times: Sequence[float], t: float) -> int:
    """Posts committed at or before `t` minus posts visible at or before `t` (both lists sorted)."""
    return bisect.bisect_right(commit_times, t) - bisect.bisect_right(visible_times, t)


def backlog_growth(commit_times: Sequence[float], visible_times: Sequence[float], seconds: float) -> dict[str, float]:
    """The backlog at the middle and the end of a writing phase of `seconds` (times in seconds from its start,
    sorted), its growth over the second half, the posts committed in that half and the delivered rate (posts that
    became visible during the phase, per second)."""
    mid, end = backlog_at(commit_times, visible_times, seconds / 2), backlog_at(commit_times, visible_times, seconds)
    half = bisect.bisect_right(commit_times, seconds) - bisect.bisect_right(commit_times, seconds / 2)
    delivered = bisect.bisect_right(visible_times, seconds) - bisect.bisect_left(visible_times, 0.0)
    return {"backlog_mid": float(mid), "backlog_end": float(end), "growth": float(end - mid),
            "second_half_commits": float(half), "delivered": delivered / seconds if seconds > 0 else 0.0}


def failures(step: Mapping[str, Any]) -> list[str]:
    """Why a step was not sustained (empty: it was). Keys: offered, achieved, errors, p99, growth,
    second_half_commits, unfinished."""
    out = []
    if step["achieved"] < ACHIEVED_SHARE * step["offered"]:
        out.append(f"writers reached {step['achieved']:,.0f} of {step['offered']:,} posts/s")
    if step.get("errors", 0):
        out.append(f"{step['errors']:.0f} writes failed")
    if not step["p99"] < P99_LIMIT_MS:  # NaN (nothing visible) fails too
        out.append(f"p99 {step['p99']:,.0f} ms >= {P99_LIMIT_MS:,.0f} ms")
    if step["growth"] > GROWTH_SHARE * step["second_half_commits"]:
        out.append(f"backlog grew by {step['growth']:,.0f} posts in the second half")
    if step.get("unfinished", 0):
        out.append(f"{step['unfinished']:.0f} posts not visible by the drain deadline")
    return out


def knee(steps: Sequence[Mapping[str, Any]]) -> int:
    """The highest offered rate whose step and every lower one were sustained (steps in any order; 0 if none)."""
    best = 0
    for step in sorted(steps, key=lambda s: s["offered"]):
        if failures(step):
            break
        best = int(step["offered"])
    return best


def ratio(knees: Mapping[str, int], kind: str = "http", over: str = "sql") -> float | None:
    """One writer kind's knee over another's of the same run: by default the HTTP writers' over the SQL writers',
    what the api keeps of the pipeline's capacity (None unless both kinds ran and `over` sustained a step)."""
    if not knees.get(over) or kind not in knees:
        return None
    return knees[kind] / knees[over]
