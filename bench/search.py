"""What search costs (docs/adr/0121, docs/search.md):

- `embed`: posts embedded per second per core by the local model (services/embedding/local.py, one onnxruntime
  thread, batches of WALFEED_EMBED_BATCH_SIZE=32 posts of the labelled set's lengths), wall time and CPU time;
- `index`: one query's latency p50/p99 at N synthetic unit vectors (k = the hybrid depth, 50) through the api's
  index (services/api/vector_index.py: i8 HNSW, its lock, the conversion of the hits), against the ceiling, the
  same query on the bare usearch index of the same build; the build's time (what an api restart costs before its
  index answers: it is rebuilt from Postgres) and its memory.

    .venv/bin/python -m bench.search [--vectors 100000 1000000] [--queries 500] [--posts 512] [--runs 3] [--json P]

Synthetic vectors are Gaussian, normalised: no clusters, the hard case for a graph index (real embeddings are
clustered). Medians over --runs runs for the latencies (one build per N).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.stats import percentile
from services.api.vector_index import VectorIndex

K = 50  # search_plan.HYBRID_MIN: what a first hybrid page asks of each half
BUILD_BATCH = 2000  # rows per fetch and add of the api's build (services/api/search_index.py BATCH)
DATA = Path(__file__).with_name("data") / "search_labelled.json"


def _unit(rows: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    unit: np.ndarray[Any, Any] = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    return unit


def _latencies(search: Any, queries: np.ndarray[Any, Any]) -> list[float]:
    times = []
    for query in queries:
        started = time.perf_counter()
        search(query)
        times.append((time.perf_counter() - started) * 1000)
    return times


def index_costs(n: int, dimension: int, queries: int, runs: int) -> dict[str, Any]:
    rng = np.random.default_rng(11)
    index = VectorIndex(dimension)
    started, cpu = time.perf_counter(), time.process_time()
    for low in range(0, n, BUILD_BATCH):
        rows = _unit(rng.standard_normal((min(BUILD_BATCH, n - low), dimension)))
        index.upsert(list(range(low + 1, low + 1 + len(rows))), rows)
    build_s, build_cpu_s = time.perf_counter() - started, time.process_time() - cpu
    asked = _unit(rng.standard_normal((queries, dimension)))
    bare = index._index  # the ceiling: the same usearch index, no wrapper
    ours_runs, bare_runs = [], []
    for _ in range(runs):  # side by side in each run
        ours_runs.append(_latencies(lambda q: index.search(q, K), asked))
        bare_runs.append(_latencies(lambda q: bare.search(q, K, threads=1), asked))

    def median(runs_ms: list[list[float]], q: float) -> float:
        return round(statistics.median(percentile(r, q) for r in runs_ms), 3)

    return {"vectors": n, "build_s": round(build_s, 1), "build_cpu_s": round(build_cpu_s, 1),
            "memory_bytes": index.memory_bytes(), "k": K,
            "api_index": {"p50_ms": median(ours_runs, 0.5), "p99_ms": median(ours_runs, 0.99)},
            "bare_usearch": {"p50_ms": median(bare_runs, 0.5), "p99_ms": median(bare_runs, 0.99)}}


def embed_costs(posts: int, batch: int, runs: int) -> dict[str, Any]:
    from services.embedding.local import LocalEmbedder

    bodies = [p["text"] for p in json.loads(DATA.read_text())["posts"]]
    texts = [f"{bodies[i % len(bodies)]} ({i})" for i in range(posts)]
    embedder = LocalEmbedder(threads=1)
    embedder.embed(texts[:batch])  # warm up
    wall, cpu = [], []
    for _ in range(runs):
        started, used = time.perf_counter(), time.process_time()
        for low in range(0, posts, batch):
            embedder.embed(texts[low:low + batch])
        wall.append(posts / (time.perf_counter() - started))
        cpu.append(posts / (time.process_time() - used))
    return {"posts": posts, "batch": batch, "posts_per_s_wall": round(statistics.median(wall), 1),
            "posts_per_cpu_s": round(statistics.median(cpu), 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vectors", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--posts", type=int, default=512, help="posts embedded per run (0: skip)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {"index": []}
    if args.posts:
        results["embed"] = embed_costs(args.posts, args.batch, args.runs)
        print(f"embed: {results['embed']}", flush=True)
    for n in args.vectors:
        row = index_costs(n, args.dimension, args.queries, args.runs)
        results["index"].append(row)
        print(f"index: {row}", flush=True)
        if args.json:  # each size as soon as it is measured: the 1M build is long
            args.json.write_text(json.dumps(results, indent=1))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
