"""Mention -> webhook latency, the pure parts (tests/unit/test_bench_mentions.py): whom each post mentions, the
receiver's record of a request, and the matching of what was received to what was posted.

A post mentions one or two users of the recipients' range (each the owner of a webhook subscribed to mentions); an
expected delivery is a (post, recipient) pair, received when a request for it reached the receiver with a valid
signature. The latency of a pair is its first receipt minus its post's commit (both time.monotonic, which is the
machine's CLOCK_MONOTONIC: the same clock in every process).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


def targets(rng: random.Random, first: int, count: int) -> tuple[int, ...]:
    """One or two distinct user ids of first .. first + count - 1 (two with probability 1/2; one when count is 1)."""
    if count < 1:
        raise ValueError(f"at least one recipient is needed, got {count}")
    picked = rng.sample(range(first, first + count), min(count, rng.choice((1, 2))))
    return tuple(picked)


def body(n: int, handles: Iterable[str]) -> str:
    """The text of post number `n` naming each handle once."""
    return " ".join([f"bench post {n}", *(f"@{h}" for h in handles)])


@dataclass(frozen=True)
class Receipt:
    """One request the receiver took: when, its webhook-id, the post and recipient its body names, whether the
    Standard Webhooks reference library verified its signature."""

    at: float
    webhook_id: str
    post_id: int | None  # None: a request without a post (a ping, or a body that is not a mention)
    recipient_id: int | None
    verified: bool

    def line(self) -> str:
        """The receiver's record: one line of space-separated fields."""
        return f"{self.at:.6f} {self.webhook_id} {self.post_id or '-'} {self.recipient_id or '-'} {int(self.verified)}"

    @classmethod
    def parse(cls, line: str) -> Receipt:
        at, webhook_id, post, recipient, verified = line.split()
        return cls(float(at), webhook_id, None if post == "-" else int(post),
                   None if recipient == "-" else int(recipient), verified == "1")


@dataclass(frozen=True)
class Match:
    latencies_ms: list[float]  # per expected pair received: first verified receipt - commit
    missing: int  # expected pairs never received (verified)
    repeats: int  # verified receipts of a pair already received (at-least-once: the same webhook-id again)
    unexpected: int  # verified receipts of a pair nobody posted
    unverified: int  # receipts whose signature did not verify (never counted as received)
    first_received: float | None  # time of the first and last receipt counted (for the achieved rate)
    last_received: float | None


def match(committed: Mapping[int, tuple[float, Sequence[int]]], receipts: Iterable[Receipt]) -> Match:
    """`committed`: post id -> (commit time, the recipients it mentions). Receipts in any order."""
    first: dict[tuple[int, int], float] = {}
    repeats = unexpected = unverified = 0
    for r in receipts:
        if not r.verified:
            unverified += 1
            continue
        post, user = r.post_id, r.recipient_id
        if post is None or user is None or post not in committed or user not in committed[post][1]:
            unexpected += 1
            continue
        key = (post, user)
        if key in first:
            repeats += 1
            first[key] = min(first[key], r.at)
        else:
            first[key] = r.at
    expected = [(p, u) for p, (_, users) in committed.items() for u in users]
    latencies = [(first[(p, u)] - committed[p][0]) * 1000 for p, u in expected if (p, u) in first]
    times = [first[k] for k in first]
    return Match(latencies, len(expected) - len(latencies), repeats, unexpected, unverified,
                 min(times) if times else None, max(times) if times else None)
