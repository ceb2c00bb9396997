"""Who a post mentions, decided without I/O: the `@handle`s in its body, the users they name, at most
MAX_MENTIONS of them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

# Notifications one post can send: a post naming dozens of accounts is spam, and one post must not fan out into
# thousands of deliveries. Mastodon's default is far higher (it stores mentions too); ten is what a conversation
# needs. The first ten distinct users named, in the order the body names them.
MAX_MENTIONS: Final = 10

# `@handle` (handles are ^[a-z0-9_]{1,30}$, matched case-insensitively as Mastodon does), not inside a word or an
# e-mail address (`bob@example.com`), not a prefix of a longer word (`@alice_longer_than_thirty...` names no one).
_MENTION: Final = re.compile(r"(?<![\w@])@([A-Za-z0-9_]{1,30})(?![\w@])")


def handles(body: str) -> list[str]:
    """The distinct handles a body names, lower-cased, in the order of their first appearance."""
    return list(dict.fromkeys(match.lower() for match in _MENTION.findall(body)))


def recipients(named: list[str], users: Mapping[str, int], author_id: int) -> list[int]:
    """The users to notify: those of the `named` handles that exist (`users`: handle -> id), not the author, each
    once, at most MAX_MENTIONS, in the order named."""
    found = dict.fromkeys(users[h] for h in named if h in users and users[h] != author_id)
    return list(found)[:MAX_MENTIONS]
