"""Fixtures of the search tests: the labelled set of bench/data/search_labelled.json as posts of the test's
database, and the api served in-process with the real local model and a fast index poll."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from services.api.app import create_app
from services.api.ratelimit import Quota
from services.api.search_config import SearchSettings
from services.core.embedding.config import EmbedderSettings
from services.core.embedding.local import LocalEmbedder
from services.core.settings import Settings
from testkit.waiting import eventually
from tests.integration.api.conftest import TEST_API, serve

LABELLED = json.loads((Path(__file__).parents[3] / "bench" / "data" / "search_labelled.json").read_text())
SEARCH = SearchSettings(poll_interval=0.1, query_timeout=10.0, limit=Quota("search", 1_000_000, 60))
TOKEN = "search-test-token"


@pytest.fixture(scope="session")
def embedder() -> LocalEmbedder:
    return LocalEmbedder(threads=1)


@pytest.fixture
def author(database_url: str) -> tuple[int, str]:
    """A user and its bearer token (inserted directly: the api's sign-up would only add a request)."""
    import hashlib

    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("INSERT INTO users (handle, token_hash) VALUES ('searcher', %s) RETURNING id",
                           (hashlib.sha256(TOKEN.encode()).digest(),)).fetchone()
    assert row is not None
    return int(row[0]), TOKEN


@pytest.fixture
def labelled_posts(database_url: str, author: tuple[int, str]) -> dict[str, int]:
    """The labelled set's posts, written by `author`: label -> post id."""
    ids = {}
    with psycopg.connect(database_url, autocommit=True) as conn:
        for post in LABELLED["posts"]:
            row = conn.execute("INSERT INTO posts (author_id, body) VALUES (%s, %s) RETURNING id",
                               (author[0], post["text"])).fetchone()
            assert row is not None
            ids[post["id"]] = int(row[0])
    return ids


Search = Callable[..., dict[str, Any]]


@pytest.fixture
def search_api(settings: Settings) -> Iterator[str]:
    with serve(create_app(settings, TEST_API, search_settings=SEARCH, embedder_settings=EmbedderSettings())) as url:
        yield url


@pytest.fixture
def search(search_api: str, author: tuple[int, str]) -> Iterator[Search]:
    with httpx.Client(base_url=search_api, timeout=30, headers={"Authorization": f"Bearer {author[1]}"}) as client:
        def ask(q: str, **params: Any) -> dict[str, Any]:
            reply = client.get("/v1/search", params={"q": q, **params})
            assert reply.status_code == 200, reply.text
            body: dict[str, Any] = reply.json()
            return body
        yield ask


def semantic_ready(search: Search) -> None:
    """Wait for the api's index to be built, its model complete."""
    eventually(lambda: search("probe", mode="semantic")["degraded"] is None, timeout=60,
               what="the search index to be ready")
