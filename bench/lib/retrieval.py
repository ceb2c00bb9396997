"""Retrieval measures and the lexical baseline of bench/embed_eval.py. Pure: no I/O
(tests/unit/test_bench_retrieval.py)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

_TOKEN = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> list[str]:
    """Lower-cased runs of letters and digits: `#walfeed` and `Walfeed's` both hold `walfeed`."""
    return _TOKEN.findall(text.lower())


def recall_at(ranked: Sequence[str], relevant: Sequence[str], k: int) -> float:
    """Share of the relevant ids found among the first k."""
    return len(set(ranked[:k]) & set(relevant)) / len(relevant)


def reciprocal_rank(ranked: Sequence[str], relevant: Sequence[str]) -> float:
    """1 / rank of the first relevant id (0 when none is ranked)."""
    return next((1.0 / rank for rank, doc in enumerate(ranked, 1) if doc in relevant), 0.0)


def bm25_scores(query: str, documents: Sequence[str], k1: float = 1.2, b: float = 0.75) -> list[float]:
    """Okapi BM25 of each document for the query, with the usual constants and idf floored at 0."""
    bags = [Counter(tokens(doc)) for doc in documents]
    average = sum(sum(bag.values()) for bag in bags) / max(len(bags), 1)
    scores = [0.0] * len(bags)
    for term in set(tokens(query)):
        having = sum(1 for bag in bags if term in bag)
        idf = max(0.0, math.log((len(bags) - having + 0.5) / (having + 0.5) + 1.0))
        for i, bag in enumerate(bags):
            f, length = bag[term], sum(bag.values())
            if f:
                scores[i] += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * length / average))
    return scores


def ranking(ids: Sequence[str], scores: Sequence[float]) -> list[str]:
    """Ids by score, best first; ids scoring 0 or less are not ranked (a lexical search does not return them)."""
    order = sorted(range(len(ids)), key=lambda i: (-scores[i], i))
    return [ids[i] for i in order if scores[i] > 0]
