"""Feed-wide limits, named with their reason. Shared by the worker (writes timelines) and the api (reads them)."""

from typing import Final

# Materialized rows kept per home timeline (Mastodon keeps 800). Older pages are read from posts + follows,
# below users.timeline_floor.
TIMELINE_CAP: Final = 800

# Posts of the followee copied into the follower's timeline when a follow is processed: enough for the first
# pages; older ones are served below the floor.
BACKFILL_LIMIT: Final = 200
