"""Cursors: round trip, and every malformed or foreign cursor is rejected with a reason."""

import base64
import contextlib

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.api import cursor


@given(st.integers(min_value=1, max_value=cursor.MAX_ID))
def test_round_trip(last: int) -> None:
    token = cursor.encode("home", last)
    assert token.isascii() and "=" not in token
    assert cursor.decode("home", token) == last


def _raw(obj: object) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(obj)).decode().rstrip("=")


@pytest.mark.parametrize("bad", [
    "", "%%%", "not base64!", "é", "x" * 500,
    _raw([1]), _raw({"v": 2, "k": "home", "id": 5}), _raw({"v": 1, "k": "user:1", "id": 5}),
    _raw({"v": 1, "k": "home", "id": 0}), _raw({"v": 1, "k": "home", "id": 2**63}),
    _raw({"v": 1, "k": "home", "id": "5"}), _raw({"v": 1, "k": "home", "id": True}),
    _raw({"v": 1, "k": "home"}),
])
def test_malformed(bad: str) -> None:
    with pytest.raises(cursor.InvalidCursor):
        cursor.decode("home", bad)


@given(st.text(max_size=300))
def test_any_text_is_a_value_or_invalid_never_a_crash(text: str) -> None:
    with contextlib.suppress(cursor.InvalidCursor):
        assert 1 <= cursor.decode("home", text) <= cursor.MAX_ID


@given(st.integers(min_value=0, max_value=cursor.MAX_ID))
def test_newer_cursors_round_trip_and_only_the_home_listing_takes_them(last: int) -> None:
    token = cursor.encode("home", last, newer=True)
    assert cursor.decode_position("home", token) == cursor.Position(last, newer=True)
    with pytest.raises(cursor.InvalidCursor):
        cursor.decode("home", token)  # a listing paged towards older posts only refuses it


@pytest.mark.parametrize("bad", [
    _raw({"v": 1, "k": "home", "id": 5, "d": "older"}), _raw({"v": 1, "k": "home", "id": 5, "d": 1}),
    _raw({"v": 1, "k": "home", "id": -1, "d": "newer"}),
])
def test_malformed_directions(bad: str) -> None:
    with pytest.raises(cursor.InvalidCursor):
        cursor.decode_position("home", bad)
