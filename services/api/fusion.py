"""Reciprocal rank fusion of ranked lists (Cormack, Clarke and Büttcher, SIGIR 2009), decided without I/O.

Each list ranks post ids best first; a post's fused score is the sum over the lists holding it of 1 / (k + rank),
rank counted from 1. k = 60 (the paper's constant) damps the head of each list so that a post ranked well by both
halves beats one ranked first by one half only. Ties go to the newer post (the larger id), so the order is total.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

K: Final = 60


def fuse(lists: Sequence[Sequence[int]], k: int = K) -> list[tuple[int, float]]:
    """(post id, fused score), best first. An id repeated within one list counts at its best rank only."""
    scores: dict[int, float] = {}
    for ranked in lists:
        seen: set[int] = set()
        for rank, post in enumerate(ranked, start=1):
            if post in seen:
                continue
            seen.add(post)
            scores[post] = scores.get(post, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], -item[0]))
