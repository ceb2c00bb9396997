"""Feed-wide limits, named with their reason. Shared by the worker (writes timelines) and the api (reads them)."""

from typing import Final

# Materialized rows kept per home timeline (Mastodon keeps 800). Older pages are read from posts + follows,
# below users.timeline_floor.
TIMELINE_CAP: Final = 800

# Posts of the followee copied into the follower's timeline when a follow is processed: enough for the first
# pages; older ones are served below the floor.
BACKFILL_LIMIT: Final = 200

# Accounts one user may follow (Twitter's limit was 5,000). A home-timeline read probes an index once per followed
# account (ADR 0031), so this bounds the slowest read; tests/integration/api/test_slowest_read.py checks that a
# user at the cap reads within WALFEED_API_STATEMENT_TIMEOUT. Following one more is a 409.
MAX_FOLLOWING: Final = 5_000
