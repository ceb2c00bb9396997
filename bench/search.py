"""What search costs (docs/adr/0121, docs/search.md):

- `embed`: posts embedded per second per core by the local model (services/core/embedding/local.py, one onnxruntime
  thread, batches of WALFEED_EMBED_BATCH_SIZE=32 posts of the labelled set's lengths), wall time and CPU time;
- `index`: one query's latency p50/p99 at N synthetic unit vectors (k = the hybrid depth, 50) through the api's
  index (services/api/vector_index.py: i8 HNSW, its lock, the conversion of the hits), against the ceiling, the
  same query on the bare usearch index of the same build; the build's time (what an api restart costs before its
  index answers: it is rebuilt from Postgres), the save and load of a copy (a restart with
  WALFEED_SEARCH_INDEX_DIR) and its memory;
- `freshness` (--freshness N): the real processes (api, relay, embedder with the local model, own database and
  AMQP prefix), N posts written one after the other through the api, each searched for by meaning until found:
  p50/p99 of the time from the post's 201 to its first semantic hit (the relay, the embedder's batch, the api's
  poll: WALFEED_SEARCH_POLL_INTERVAL, default 1 s), each post after a random pause of up to one poll interval.

- `api` (--api N): `GET /v1/search` end to end, one request at a time, per mode, at N posts in Postgres (bodies
  drawn from the labelled set's words, synthetic vectors for the local model), the api with one worker process
  and its index built: p50/p99 of the request, query embedding included.

    .venv/bin/python -m bench.search [--vectors 100000 1000000] [--queries 500] [--posts 512] [--runs 3]
                                     [--freshness 50] [--api 100000] [--json P]

Synthetic vectors are Gaussian, normalised: no clusters, the hard case for a graph index (real embeddings are
clustered). Medians over --runs runs for the latencies (one build per N).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

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

    with tempfile.TemporaryDirectory() as folder:  # a restart with WALFEED_SEARCH_INDEX_DIR: save, then load
        path = str(Path(folder) / "index.usearch")
        started = time.perf_counter()
        index.save(path)
        save_s, started = time.perf_counter() - started, time.perf_counter()
        VectorIndex(dimension).load(path)
        load_s = time.perf_counter() - started
    return {"vectors": n, "build_s": round(build_s, 1), "build_cpu_s": round(build_cpu_s, 1),
            "save_s": round(save_s, 2), "load_s": round(load_s, 2),
            "memory_bytes": index.memory_bytes(), "k": K,
            "api_index": {"p50_ms": median(ours_runs, 0.5), "p99_ms": median(ours_runs, 0.99)},
            "bare_usearch": {"p50_ms": median(bare_runs, 0.5), "p99_ms": median(bare_runs, 0.99)}}


def embed_costs(posts: int, batch: int, runs: int) -> dict[str, Any]:
    from services.core.embedding.local import LocalEmbedder

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


def freshness(posts: int, poll_interval: float | None) -> dict[str, Any]:
    import httpx

    from bench.lib import infra
    from testkit.processes import free_port
    from testkit.waiting import eventually

    logs = infra.results_folder(None, "search") / "logs"
    bodies = [p["text"] for p in json.loads(DATA.read_text())["posts"]]
    with infra.Resources(uuid.uuid4().hex[:6], logs) as res:
        url = res.database("search")
        prefix = res.prefix("search")
        slot = res.slot(url, "search")
        port = free_port()
        env = {"WALFEED_DATABASE_URL": url, "WALFEED_AMQP_URL": infra.AMQP, "WALFEED_AMQP_PREFIX": prefix,
               "WALFEED_SLOT": slot, "WALFEED_API_WORKERS": "1", "WALFEED_API_SEARCH_LIMIT": "0",
               "WALFEED_API_WRITE_LIMIT": "0", "WALFEED_EMBEDDER_METRICS_PORT": "0",
               "WALFEED_RELAY_METRICS_PORT": "0", "WALFEED_LOG_LEVEL": "WARNING",
               **({"WALFEED_SEARCH_POLL_INTERVAL": str(poll_interval)} if poll_interval else {})}
        res.start("api", ["api", "--port", str(port)], env)
        res.start("relay", ["relay"], env)
        res.start("embedder", ["embedder"], env)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            infra.wait_ready(client)
            auth = {"Authorization": f"Bearer {client.post('/v1/users', json={'handle': 'bench'}).json()['token']}"}

            def hit(text: str, post: int) -> bool:
                items = client.get("/v1/search", params={"q": text, "mode": "semantic", "limit": 5},
                                   headers=auth).json()
                return items["degraded"] is None and any(i["id"] == post for i in items["items"])

            eventually(lambda: client.get("/v1/search", params={"q": "x", "mode": "semantic"},
                                          headers=auth).json()["degraded"] is None, timeout=120, interval=0.1,
                       what="the api's index built, its model complete (not measured)")
            seconds = []
            pause = np.random.default_rng(3)
            for i in range(-1, posts):  # post -1 warms the path up (the relay's and embedder's first): not counted
                # A random pause first: posting right after the previous hit would post just after a poll of the
                # api's index each time, and measure the poll interval instead of the path.
                time.sleep(float(pause.uniform(0, poll_interval or 1.0)))
                text = f"{bodies[i % len(bodies)]} #{i}"
                post = client.post("/v1/posts", json={"body": text}, headers=auth).json()["id"]
                written = time.monotonic()
                while not hit(text, post):
                    if time.monotonic() - written > 60:
                        raise SystemExit(f"post {post} not found by meaning in 60 s")
                    time.sleep(0.01)  # the probe's pace, not a wait for a state: the state is polled
                if i >= 0:
                    seconds.append(time.monotonic() - written)
    return {"posts": posts, "poll_interval_s": poll_interval or 1.0,
            "p50_s": round(percentile(seconds, 0.5), 3), "p99_s": round(percentile(seconds, 0.99), 3),
            "max_s": round(max(seconds), 3)}


API_SEED = """
INSERT INTO users (handle, token_hash) VALUES ('bench', sha256('bench1'::bytea));
INSERT INTO posts (author_id, body)
SELECT 1, (SELECT string_agg((%(words)s::text[])[1 + ((g * 7 + k * k * 13) %% %(n_words)s)], ' ')
           FROM generate_series(1, 12) k)
FROM generate_series(1, %(posts)s) g;
INSERT INTO embedding_models (model, position, complete_at) VALUES (%(model)s, %(posts)s, now());
"""


def api_latency(posts: int, queries: int) -> dict[str, Any]:
    import re

    import httpx

    from bench.lib import infra
    from services.core.embedding.local import DIMENSION, MODEL_ID
    from services.core.embedding.vectors import to_stored
    from testkit.processes import free_port
    from testkit.waiting import eventually

    data = json.loads(DATA.read_text())
    words = sorted({w for p in data["posts"] for w in re.findall(r"[a-z]+", p["text"].lower())})
    asked = [q["text"] for q in data["queries"]]
    logs = infra.results_folder(None, "search") / "logs"
    rng = np.random.default_rng(5)
    with infra.Resources(uuid.uuid4().hex[:6], logs) as res:
        url = res.database("searchapi")
        with psycopg.connect(url, autocommit=True) as conn:
            psycopg.ClientCursor(conn).execute(API_SEED, {"words": words, "n_words": len(words), "posts": posts,
                                                          "model": MODEL_ID})
            for low in range(1, posts + 1, 5000):
                ids = list(range(low, min(posts, low + 4999) + 1))
                blobs = to_stored(_unit(rng.standard_normal((len(ids), DIMENSION))))
                conn.execute("INSERT INTO post_embeddings (post_id, model, dimension, vector) SELECT i, %s, %s, v "
                             "FROM unnest(%s::bigint[], %s::bytea[]) AS t(i, v)", (MODEL_ID, DIMENSION, ids, blobs))
            conn.execute("ANALYZE")
        port = free_port()
        env = {"WALFEED_DATABASE_URL": url, "WALFEED_AMQP_URL": infra.AMQP, "WALFEED_API_WORKERS": "1",
               "WALFEED_API_SEARCH_LIMIT": "0", "WALFEED_LOG_LEVEL": "WARNING"}
        started = time.monotonic()
        res.start("api", ["api", "--port", str(port)], env)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60,
                          headers={"Authorization": "Bearer bench1"}) as client:
            infra.wait_ready(client)
            eventually(lambda: client.get("/v1/search", params={"q": "x", "mode": "semantic"}).json()["degraded"]
                       is None, timeout=1800, interval=0.5, what="the api's index built")
            ready_s = time.monotonic() - started
            out: dict[str, Any] = {"posts": posts, "index_ready_s": round(ready_s, 1)}
            for mode in ("text", "semantic", "hybrid"):
                times = []
                for i in range(queries):
                    began = time.perf_counter()
                    reply = client.get("/v1/search", params={"q": asked[i % len(asked)], "mode": mode})
                    times.append((time.perf_counter() - began) * 1000)
                    assert reply.status_code == 200 and reply.json()["mode"] == mode, reply.text
                out[mode] = {"p50_ms": round(percentile(times, 0.5), 2), "p99_ms": round(percentile(times, 0.99), 2)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vectors", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--posts", type=int, default=512, help="posts embedded per run (0: skip)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--freshness", type=int, default=0, help="posts of the freshness measurement (0: skip)")
    parser.add_argument("--poll-interval", type=float, action="append",
                        help="WALFEED_SEARCH_POLL_INTERVAL of the freshness api (repeat: one measurement each)")
    parser.add_argument("--api", type=int, default=0, help="posts of the end-to-end api measurement (0: skip)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {"index": []}
    if args.api:
        results["api"] = api_latency(args.api, min(args.queries, 200))
        print(f"api: {results['api']}", flush=True)
    if args.freshness:
        results["freshness"] = [freshness(args.freshness, p) for p in (args.poll_interval or [None])]
        print(f"freshness: {results['freshness']}", flush=True)
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
