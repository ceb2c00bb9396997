"""Bearer tokens: hashed, compared in constant time, header parsing."""

import pytest

from services.api import tokens


def test_tokens_are_random_and_only_their_hash_is_kept() -> None:
    a, b = tokens.new_token(), tokens.new_token()
    assert a != b and len(a) >= 40
    assert tokens.matches(tokens.token_hash(a), a)
    assert not tokens.matches(tokens.token_hash(a), b)
    assert len(tokens.token_hash(a)) == 32


@pytest.mark.parametrize(("header", "token"), [
    ("Bearer abc", "abc"), ("bearer abc", "abc"), ("Bearer  abc ", "abc"),
    (None, None), ("", None), ("Bearer", None), ("Bearer ", None), ("Basic abc", None),
    ("Bearer " + "x" * 200, None), ("Bearer é", None),
])
def test_bearer_header(header: str | None, token: str | None) -> None:
    assert tokens.bearer_token(header) == token
