"""Classify what the broker delivered against what the database committed (Jepsen's lost / duplicated /
unexpected), and compare timelines with their definition. Pure: the test gathers the inputs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Delivery:
    lost: frozenset[str]            # committed outbox events never seen on the exchange
    unexpected: frozenset[str]      # seen on the exchange, never committed (and not injected on purpose)
    duplicated: dict[str, int]      # event id -> extra copies seen
    published: int                  # distinct committed events seen

    @property
    def duplicates(self) -> int:
        return sum(self.duplicated.values())


def classify_delivery(committed: Iterable[str], seen: Iterable[str], injected: Iterable[str] = ()) -> Delivery:
    committed_set, injected_set = set(committed), set(injected)
    counts = Counter(seen)
    return Delivery(
        lost=frozenset(committed_set - counts.keys()),
        unexpected=frozenset(counts.keys() - committed_set - injected_set),
        duplicated={k: n - 1 for k, n in counts.items() if n > 1 and k in committed_set},
        published=len(committed_set & counts.keys()),
    )


def expected_timelines(
    users: Iterable[int], follows: Iterable[tuple[int, int]], live_posts: Mapping[int, int]
) -> dict[int, list[int]]:
    """The timeline definition (docs/guarantees.md): user -> ids of the posts of everyone they follow and their
    own, newest first. `live_posts`: post id -> author id, deleted posts left out."""
    following: dict[int, set[int]] = {u: {u} for u in users}
    for follower, followee in follows:
        following.setdefault(follower, {follower}).add(followee)
    by_author: dict[int, list[int]] = {}
    for post, author in live_posts.items():
        by_author.setdefault(author, []).append(post)
    return {
        user: sorted((p for a in authors for p in by_author.get(a, ())), reverse=True)
        for user, authors in following.items()
    }


@dataclass(frozen=True)
class TimelineDiff:
    user: int
    missing: list[int] = field(default_factory=list)
    extra: list[int] = field(default_factory=list)
    repeated: list[int] = field(default_factory=list)
    out_of_order: bool = False


def diff_timelines(expected: Mapping[int, list[int]], actual: Mapping[int, list[int]]) -> list[TimelineDiff]:
    diffs = []
    for user, want in expected.items():
        got = actual.get(user, [])
        repeated = sorted(k for k, n in Counter(got).items() if n > 1)
        missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
        ordered = got == sorted(got, reverse=True)
        if missing or extra or repeated or not ordered:
            diffs.append(TimelineDiff(user, missing, extra, repeated, not ordered))
    return diffs
