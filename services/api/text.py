"""What a post body may be, decided without I/O: NFC-normalised, at least one visible character, no bidi
embedding, override or isolate controls (ADR 0034). Raises ValueError with the reason (a 422 problem)."""

from __future__ import annotations

import unicodedata
from typing import Final

MAX_CHARS: Final = 500  # docs/api.md; the posts table checks it too

# Explicit bidi embeddings and overrides (U+202A-202E) and isolates (U+2066-2069): they reorder the text that
# follows, and an unterminated one reorders what a client renders after the post (ADR 0034). The marks
# U+200E, U+200F and U+061C, which right-to-left writers use, stay allowed.
BIDI_CONTROLS: Final = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")

# Categories that render nothing on their own: separators (spaces), controls, format characters (zero-width
# space, joiners, BOM), combining marks without a base, unassigned and private use.
_INVISIBLE_CATEGORIES: Final = frozenset({"Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn", "Mn", "Me"})
# Letters and symbols that render as blank space (used for "empty" names and posts).
_BLANK_GLYPHS: Final = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def visible(char: str) -> bool:
    return char not in _BLANK_GLYPHS and unicodedata.category(char) not in _INVISIBLE_CATEGORIES


def normalize_body(value: str) -> str:
    """The body as stored: NFC. Raises ValueError when it cannot be one."""
    body = unicodedata.normalize("NFC", value)
    if len(body) > MAX_CHARS:  # NFC can lengthen a few characters (e.g. U+0344 becomes two)
        raise ValueError(f"body must be at most {MAX_CHARS} characters after Unicode NFC normalisation")
    if not any(visible(char) for char in body):
        raise ValueError("body must contain at least one visible character (not only spaces or invisible ones)")
    bidi = sorted({f"U+{ord(char):04X}" for char in body if char in BIDI_CONTROLS})
    if bidi:
        raise ValueError(f"body must not contain bidi embedding, override or isolate controls ({', '.join(bidi)})")
    return body
