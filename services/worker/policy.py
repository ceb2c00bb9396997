"""The fan-out's pure decisions of its own: push or pull, when to trim, the backfill floor. No I/O. (What to do
with a message, when to retry it, are the runtime's: services/consumer/outcomes.py, retry.py, processor.py.)"""

from __future__ import annotations

from typing import Final

# A fan-out checks the recipients of a post for trimming when post_id % TRIM_EVERY == 0: a timeline then holds
# about TIMELINE_CAP + TRIM_EVERY rows at most between trims (a quarter over the cap), and the check (an index scan
# of about TIMELINE_CAP entries per recipient) costs about TIMELINE_CAP / TRIM_EVERY index reads per inserted row.
TRIM_EVERY: Final = 200


def push(follower_count: int, threshold: int) -> bool:
    """Fan out on write (True) or merge at read time (False): authors at or above the threshold are pulled."""
    return follower_count < threshold


def should_trim(post_id: int) -> bool:
    return post_id % TRIM_EVERY == 0


def backfill_floor(found: int, smallest: int | None, limit: int) -> int | None:
    """After backfilling `limit` of `found` (asked for limit + 1) posts: the floor to raise to, if older ones exist."""
    return smallest if found > limit and smallest is not None else None
