"""bench/read_statement.py derives its variants from today's home statement: each derivation still finds the text it
cuts, so a change of the statement fails here, not in the middle of a benchmark run."""

from __future__ import annotations

import pytest

from bench import read_statement
from services.api.partitions import Partition

PART = Partition("public", "timelines_p07", 32, 7, "satisfies_hash_partition('16385'::oid, 32, 7, user_id)")


@pytest.mark.parametrize("name", [n for n, v in read_statement.VARIANTS.items() if v is not None])
def test_every_variant_is_derived_from_the_statement_and_keeps_its_parameters(name: str) -> None:
    variant = read_statement.VARIANTS[name]
    assert variant is not None
    text = variant(PART)
    assert '"public"."timelines_p07"' in text  # the reader's partition, named as the api names it
    assert "%(user)s" in text and "%(limit)s" in text


def test_the_cut_variants_leave_out_what_they_price() -> None:
    design = read_statement.design(PART)
    rows = read_statement.rows(PART)
    assert "posts_pulled" not in rows and "follows" not in rows and "me" not in rows.split()
    assert rows in design.replace("(SELECT low FROM me)", "1")  # the materialized rows' branch, as the design has it
    no_pulled = read_statement.no_pulled(PART)
    assert "fanned_out = false" in design and "fanned_out = false" not in no_pulled
    ids_first = read_statement.ids_first(PART)
    assert "JOIN posts p ON p.id = t.post_id" in design and "JOIN posts p ON p.id = t.post_id" not in ids_first
    assert "gone" in ids_first


def test_a_statement_without_the_text_a_variant_cuts_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"update bench/read_statement\.py"):
        read_statement._between("WITH x AS (SELECT 1)", "pushed AS MATERIALIZED (", "), reach AS MATERIALIZED")
