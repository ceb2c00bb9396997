"""Post bodies: NFC, at least one visible character, no bidi embedding/override/isolate controls (ADR 0034)."""

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.api import text


def test_bodies_are_stored_nfc() -> None:
    assert text.normalize_body("cafe\u0301") == "caf\u00e9"
    assert text.normalize_body("\u212b") == "\u00c5"  # ANGSTROM SIGN -> A WITH RING


@pytest.mark.parametrize("body", [" ", "\t\n ", "\u200b", "\u200b\u200c\u200d\ufeff", "\u3000", "\u00a0",
                                  "\u0301", "\u3164", "\u2800 \u2800", "\u200e"])
def test_bodies_without_a_visible_character_are_rejected(body: str) -> None:
    with pytest.raises(ValueError, match="visible"):
        text.normalize_body(body)


@pytest.mark.parametrize("control", sorted(text.BIDI_CONTROLS))
def test_bidi_embedding_override_and_isolate_controls_are_rejected(control: str) -> None:
    with pytest.raises(ValueError, match=f"U\\+{ord(control):04X}"):
        text.normalize_body(f"abc {control}gnp.exe")


@pytest.mark.parametrize("body", ["hello", "\u05e9\u05dc\u05d5\u05dd \u200fok", "\u0645\u0631\u062d\u0628\u0627\u061c",
                                  " x ", "\U0001f600", "a\u200bb"])
def test_ordinary_text_and_bidi_marks_pass(body: str) -> None:
    assert text.normalize_body(body) == unicodedata.normalize("NFC", body)


def test_nfc_that_lengthens_past_the_limit_is_rejected() -> None:
    with pytest.raises(ValueError, match="500"):
        text.normalize_body("\u0344" * 300)  # each becomes two characters


@given(st.text(min_size=1, max_size=50))
def test_accepted_bodies_are_nfc_and_have_a_visible_character(body: str) -> None:
    try:
        result = text.normalize_body(body)
    except ValueError:
        return
    assert unicodedata.is_normalized("NFC", result)
    assert any(text.visible(c) for c in result) and not text.BIDI_CONTROLS & set(result)
