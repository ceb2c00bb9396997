"""Settings of the api's search (docs/search.md), read once at start; the embedder it embeds queries with is
WALFEED_EMBEDDER's (services/embedding/config.py).

| variable | default | meaning |
|---|---|---|
| `WALFEED_SEARCH_POLL_INTERVAL` | `1.0` | seconds between two reads of new vectors and tombstones (ADR 0122) |
| `WALFEED_SEARCH_QUERY_TIMEOUT` | `2.0` | seconds a query's embedding may take; then text answers, `degraded` |
| `WALFEED_SEARCH_INDEX_DIR` | unset | saved copies of the index: a start loads one, no rebuild |
| `WALFEED_SEARCH_INDEX_SAVE_INTERVAL` | `300` | seconds between two saved copies (one per machine) |
| `WALFEED_API_SEARCH_LIMIT` | `60` | searches per user per window; 0: no limit |
| `WALFEED_API_SEARCH_WINDOW` | `60` | that window, in seconds |
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from services.api.ratelimit import Quota
from services.core.settings import Env, SettingsError

# A search embeds a query (~5-10 ms of a core with the local model) and asks the index and Postgres: a person
# searches far less than once a second, a script scraping the corpus more.
SEARCH_LIMIT: Final = Quota("search", 60, 60)


@dataclass(frozen=True, slots=True)
class SearchSettings:
    poll_interval: float = 1.0
    query_timeout: float = 2.0
    limit: Quota = SEARCH_LIMIT
    index_dir: str | None = None
    save_interval: float = 300.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SearchSettings:
        env = Env(environ)
        return cls(
            poll_interval=env.float("WALFEED_SEARCH_POLL_INTERVAL", 1.0, minimum=0.05, maximum=3600.0),
            query_timeout=env.float("WALFEED_SEARCH_QUERY_TIMEOUT", 2.0, minimum=0.05, maximum=60.0),
            index_dir=_directory(env.optional("WALFEED_SEARCH_INDEX_DIR")),
            save_interval=env.float("WALFEED_SEARCH_INDEX_SAVE_INTERVAL", 300.0, minimum=1.0, maximum=86_400.0),
            limit=Quota(SEARCH_LIMIT.policy,
                        env.int("WALFEED_API_SEARCH_LIMIT", SEARCH_LIMIT.limit, minimum=0, maximum=1_000_000),
                        env.int("WALFEED_API_SEARCH_WINDOW", SEARCH_LIMIT.window, minimum=1, maximum=86_400)),
        )


def _directory(value: str | None) -> str | None:
    if value is not None and not os.path.isdir(value):
        raise SettingsError(f"WALFEED_SEARCH_INDEX_DIR={value!r} is not a directory: create it (writable by the api) "
                            "or leave the setting unset (each start then rebuilds the index from Postgres)")
    return value
