"""Settings of the api's search (docs/settings.md, "api"), read once at start; the embedder it embeds queries with is
WALFEED_EMBEDDER's (services/core/embedding/config.py). Each setting is declared once below (services/core/settings.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from services.api.ratelimit import Quota
from services.core.settings import Declared, Env, Float, Int, OptionalStr, SettingsError

POLL_INTERVAL: Final = Float(
    "WALFEED_SEARCH_POLL_INTERVAL", 1.0,
    "seconds between two reads of new vectors and tombstones into each api process's index (ADR 0122)",
    minimum=0.05, maximum=3600.0)
QUERY_TIMEOUT: Final = Float(
    "WALFEED_SEARCH_QUERY_TIMEOUT", 2.0,
    "seconds the embedding of a search query may take; then the search answers from text, "
    "`degraded: embedder-unavailable`", minimum=0.05, maximum=60.0)
INDEX_DIR: Final = OptionalStr(
    "WALFEED_SEARCH_INDEX_DIR",
    "a directory (writable by the api) for saved copies of each process's search index, "
    "`{model}.{database}.{position}.usearch`: a start loads the newest of its database and polls from its position "
    "instead of rebuilding from Postgres (ADR 0121); unset: every start rebuilds", allowed="an existing directory")
SAVE_INTERVAL: Final = Float(
    "WALFEED_SEARCH_INDEX_SAVE_INTERVAL", 300.0,
    "seconds between two saved copies; a process does not save when another one of the machine saved a copy within "
    "that time", minimum=1.0, maximum=86_400.0)
# A search embeds a query (~5-10 ms of a core with the local model) and asks the index and Postgres: a person
# searches far less than once a second, a script scraping the corpus more.
SEARCH_LIMIT: Final = Int("WALFEED_API_SEARCH_LIMIT", 60,
                          "searches (`GET /v1/search`) per user per window; `0`: no limit", minimum=0,
                          maximum=1_000_000)
SEARCH_WINDOW: Final = Int("WALFEED_API_SEARCH_WINDOW", 60, "that window, in seconds", minimum=1, maximum=86_400)
SETTINGS: Final[tuple[Declared, ...]] = (SEARCH_LIMIT, SEARCH_WINDOW, POLL_INTERVAL, QUERY_TIMEOUT, INDEX_DIR,
                                         SAVE_INTERVAL)
DEFAULT_SEARCHES: Final = Quota("search", SEARCH_LIMIT.default_value(), SEARCH_WINDOW.default_value())


@dataclass(frozen=True, slots=True)
class SearchSettings:
    poll_interval: float = POLL_INTERVAL.default_value()
    query_timeout: float = QUERY_TIMEOUT.default_value()
    limit: Quota = DEFAULT_SEARCHES
    index_dir: str | None = None
    save_interval: float = SAVE_INTERVAL.default_value()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SearchSettings:
        env = Env(environ)
        return cls(
            poll_interval=POLL_INTERVAL.read(env),
            query_timeout=QUERY_TIMEOUT.read(env),
            limit=Quota(DEFAULT_SEARCHES.policy, SEARCH_LIMIT.read(env), SEARCH_WINDOW.read(env)),
            index_dir=_directory(INDEX_DIR.read(env)),
            save_interval=SAVE_INTERVAL.read(env),
        )


def _directory(value: str | None) -> str | None:
    if value is not None and not os.path.isdir(value):
        raise SettingsError(f"{INDEX_DIR.name}={value!r} is not a directory: create it (writable by the api) or "
                            "leave the setting unset (each start then rebuilds the index from Postgres)")
    return value
