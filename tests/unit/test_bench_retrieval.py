"""The measures of bench/embed_eval.py, and the labelled set's promise that its semantic queries share no word
with their answers."""

from __future__ import annotations

import json

from bench.lib import retrieval
from tests.unit.environment import ROOT


def test_recall_counts_the_relevant_ids_among_the_first_k() -> None:
    assert retrieval.recall_at(["a", "b", "c", "d"], ["b", "d"], 2) == 0.5
    assert retrieval.recall_at(["a", "b", "c", "d"], ["b", "d"], 4) == 1.0


def test_reciprocal_rank_is_one_over_the_first_relevant_rank() -> None:
    assert retrieval.reciprocal_rank(["a", "b", "c"], ["c", "b"]) == 0.5
    assert retrieval.reciprocal_rank(["a"], ["z"]) == 0.0


def test_bm25_ranks_the_document_with_the_rare_term_first_and_skips_the_rest() -> None:
    docs = ["the cat sat", "the dog ran", "the cat and the dog"]
    scores = retrieval.bm25_scores("cat sat", docs)
    assert retrieval.ranking(["a", "b", "c"], scores) == ["a", "c"]


def test_the_labelled_semantic_queries_share_no_word_with_their_answers() -> None:
    data = json.loads((ROOT / "bench/data/search_labelled.json").read_text())
    posts = {post["id"]: post["text"] for post in data["posts"]}
    semantic = [q for q in data["queries"] if q["kind"] == "semantic"]
    assert len(posts) >= 50 and len(semantic) >= 20
    for query in data["queries"]:
        words = set(retrieval.tokens(query["text"]))
        for answer in query["relevant"]:
            shared = words & set(retrieval.tokens(posts[answer]))
            assert (not shared) if query["kind"] == "semantic" else words <= shared, (query["id"], answer, shared)
