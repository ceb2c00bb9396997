"""What a usearch HNSW index of post vectors costs (docs/adr/0120): memory per vector stored as f32 and as i8,
search latency p50/p99 of one query (k=10) at N synthetic unit vectors, and recall@10 against exact search; beside
it the ceiling, brute force in numpy (one matrix-vector product and a partial sort over all N vectors).

    .venv/bin/python -m bench.vector_index [--vectors 100000] [--dimension 384] [--queries 500] [--json PATH]

Synthetic vectors are Gaussian, normalised: no clusters, the hard case for a graph index (real embeddings are
clustered, so recall there is higher at the same settings). usearch is not a walfeed dependency yet: install it
in a scratch virtualenv to run this.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.stats import percentile

K = 10


def _latencies(search: Any, queries: np.ndarray[Any, Any]) -> tuple[list[float], list[np.ndarray[Any, Any]]]:
    times, found = [], []
    for query in queries:
        started = time.perf_counter()
        found.append(search(query))
        times.append((time.perf_counter() - started) * 1000)
    return times, found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vectors", type=int, default=100_000)
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from usearch.index import Index

    rng = np.random.default_rng(7)
    data = rng.standard_normal((args.vectors, args.dimension)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    queries = data[rng.choice(args.vectors, args.queries, replace=False)] + \
        0.3 * rng.standard_normal((args.queries, args.dimension)).astype(np.float32) / np.sqrt(args.dimension)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)

    def brute(query: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        scores = data @ query
        top = np.argpartition(-scores, K)[:K]
        return top[np.argsort(-scores[top])]
    brute_ms, exact = _latencies(brute, queries)
    results: dict[str, Any] = {"vectors": args.vectors, "dimension": args.dimension, "k": K,
                               "brute_force_numpy": {"p50_ms": round(percentile(brute_ms, 0.5), 3),
                                                     "p99_ms": round(percentile(brute_ms, 0.99), 3)}}
    print(f"brute force numpy: p50 {percentile(brute_ms, 0.5):.2f} ms, p99 {percentile(brute_ms, 0.99):.2f} ms")
    for dtype in ("f32", "i8"):
        index = Index(ndim=args.dimension, metric="cos", dtype=dtype)
        started = time.perf_counter()
        index.add(np.arange(args.vectors), data)
        build = time.perf_counter() - started
        memory = index.memory_usage
        with tempfile.TemporaryDirectory() as folder:
            index.save(str(Path(folder) / "index.usearch"))
            on_disk = (Path(folder) / "index.usearch").stat().st_size
        row: dict[str, Any] = {"build_s": round(build, 1), "memory_bytes": memory, "file_bytes": on_disk,
                               "memory_per_million_gb": round(memory / args.vectors * 1e6 / 1e9, 2),
                               "connectivity": index.connectivity}
        for expansion in (64, 256):  # usearch's default, and a deeper search
            index.expansion_search = expansion  # type: ignore[misc]  # a setter at run time, typed read-only
            ms, found = _latencies(lambda q: index.search(q, K).keys, queries)  # noqa: B023
            pairs = list(zip(found, exact, strict=True))
            row[f"ef{expansion}"] = {
                "p50_ms": round(percentile(ms, 0.5), 3), "p99_ms": round(percentile(ms, 0.99), 3),
                "recall_at_1": round(float(np.mean([f[0] == e[0] for f, e in pairs])), 3),
                "recall_at_10": round(float(np.mean([len(set(f.tolist()) & set(e.tolist())) / K
                                                     for f, e in pairs])), 3)}
        results[f"usearch_{dtype}"] = row
        print(f"usearch {dtype}: {row}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
