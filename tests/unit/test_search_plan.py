"""Pure decisions of search: reciprocal rank fusion, the mode answered, candidates, cursors, page cuts."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.api import fusion, index_files, search_plan
from services.api.search_plan import Query
from services.core.embedding.vectors import from_stored, to_stored

QUERY = Query("cats", "hybrid", None, None, None)


def test_fusion_prefers_a_post_both_lists_rank_over_one_first_in_one_list() -> None:
    fused = fusion.fuse([[1, 2, 3], [4, 2, 5]])
    assert fused[0][0] == 2
    assert fused[0][1] == pytest.approx(2 / 62)


def test_fusion_ties_go_to_the_newer_post_and_repeats_count_once() -> None:
    assert fusion.fuse([[7, 7, 9]]) == [(7, 1 / 61), (9, 1 / 63)]
    assert [post for post, _ in fusion.fuse([[3], [5]])] == [5, 3]


@given(st.lists(st.lists(st.integers(1, 50), max_size=20), max_size=3))
def test_fusion_holds_every_post_once_in_non_increasing_score(lists: list[list[int]]) -> None:
    fused = fusion.fuse(lists)
    assert sorted(p for p, _ in fused) == sorted({p for ranked in lists for p in ranked})
    assert all(a[1] >= b[1] for a, b in itertools.pairwise(fused))


@pytest.mark.parametrize(("mode", "unavailable", "expected"), [
    ("hybrid", None, ("hybrid", None)),
    ("semantic", None, ("semantic", None)),
    ("text", None, ("text", None)),
    ("text", search_plan.INDEX_LOADING, ("text", None)),  # a text search is never degraded
    ("hybrid", search_plan.EMBEDDER_OFF, ("text", "embedder-off")),
    ("semantic", search_plan.MODEL_INCOMPLETE, ("text", "model-incomplete")),
])
def test_the_mode_answered_and_why(mode: search_plan.Mode, unavailable: str | None,
                                   expected: tuple[str, str | None]) -> None:
    planned = search_plan.plan(mode, unavailable)
    assert (planned.answered_mode, planned.degraded) == expected


def test_a_failed_query_embedding_answers_from_text_saying_so() -> None:
    planned = search_plan.after_embedding_failure()
    assert (planned.text, planned.semantic, planned.degraded) == (True, False, "embedder-unavailable")


def test_candidates_grow_until_enough_survive_or_the_index_is_exhausted() -> None:
    assert search_plan.candidates(21) == 42
    assert search_plan.candidates(1) == 32
    assert search_plan.next_candidates(42, 10, 21, 10_000) == 168
    assert search_plan.next_candidates(42, 21, 21, 10_000) is None  # enough
    assert search_plan.next_candidates(42, 10, 21, 40) is None  # asked for the whole index already
    assert search_plan.next_candidates(4096, 10, 21, 10**6) is None  # the cap


def test_a_cursor_points_into_its_own_query_only() -> None:
    cursor = search_plan.encode_cursor(QUERY, 20)
    assert search_plan.decode_cursor(QUERY, cursor) == 20
    since = datetime(2026, 1, 1, tzinfo=UTC)
    for other in (Query("dogs", "hybrid", None, None, None), Query("cats", "text", None, None, None),
                  Query("cats", "hybrid", 3, None, None), Query("cats", "hybrid", None, since, None)):
        with pytest.raises(search_plan.InvalidSearchCursor, match="another query"):
            search_plan.decode_cursor(other, cursor)


@pytest.mark.parametrize("cursor", ["", "x" * 300, "é", "bm90IGpzb24", search_plan.encode_cursor(QUERY, 0)[:-3]])
def test_a_cursor_the_api_did_not_issue_is_refused(cursor: str) -> None:
    with pytest.raises(search_plan.InvalidSearchCursor):
        search_plan.decode_cursor(QUERY, cursor)


def test_page_cuts_stop_at_the_last_result_and_at_the_depth_limit() -> None:
    assert search_plan.page_cut(21, 0, 20) == (slice(0, 20), 20)
    assert search_plan.page_cut(20, 0, 20) == (slice(0, 20), None)
    assert search_plan.page_cut(search_plan.MAX_DEPTH + 1, search_plan.MAX_DEPTH - 10, 10)[1] is None
    assert search_plan.depth(0, 20) == 21
    assert search_plan.depth(990, 100) == search_plan.MAX_DEPTH + 1


def test_stored_vectors_round_trip_and_a_wrong_length_is_refused() -> None:
    rows = np.array([[0.6, 0.8], [1.0, 0.0]], dtype=np.float32)
    blobs = to_stored(rows)
    assert blobs[0] == np.array([0.6, 0.8], dtype="<f4").tobytes()
    assert np.array_equal(from_stored(blobs, 2), rows)
    with pytest.raises(ValueError, match="12 bytes, expected 8"):
        from_stored([b"\0" * 12], 2)


def test_saved_index_files_are_found_newest_first_and_the_older_ones_pruned() -> None:
    model, db = "ollama:nomic/v1.5", "7300000000000000001-16384"
    names = [index_files.name(model, db, x) for x in (10, 30, 20)] + [
        index_files.stem(model, db) + ".abc.usearch", "other.40.usearch", index_files.name(model, db, 50) + ".123.tmp"]
    assert index_files.name(model, db, 7).startswith("ollama_nomic_v1.5-") and \
        index_files.name(model, db, 7).endswith(".7300000000000000001-16384.7.usearch")
    assert [s.xmin for s in index_files.saved(model, db, names)] == [30, 20, 10]
    assert index_files.stale(model, db, names) == [index_files.name(model, db, 10)]


def test_a_saved_index_belongs_to_one_model_and_one_database() -> None:
    """A database made again (another oid) or restored into another cluster (another system identifier) never loads
    the files of the one before; nor does a model whose id differs only in characters a file name cannot hold."""
    model, db = "ollama:a/b", "7300000000000000001-16384"
    names = [index_files.name(model, db, 99)]
    assert index_files.saved(model, "7300000000000000001-24576", names) == []
    assert index_files.saved(model, "7399999999999999999-16384", names) == []
    assert index_files.saved("ollama:a_b", db, names) == []
    assert index_files.stale(model, "7300000000000000001-24576", names * 3) == []  # another's files are left
