"""`walfeed migrate` (and bootstrap, which runs it) twice at once on an empty database: one applies each migration,
the other waits for it and applies nothing twice; neither fails (docs/operations.md: safe to run twice at once)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from services.core.migrate import apply_schema, migration_files
from testkit.infra import Infra
from tests.integration import migrated

pytestmark = pytest.mark.integration


@pytest.fixture
def empty(infra: Infra) -> Iterator[str]:
    with migrated.empty_database(infra) as url:
        yield url


@pytest.mark.parametrize("run", range(3))
def test_two_first_migrations_at_once_apply_each_migration_once(empty: str, run: int) -> None:
    with ThreadPoolExecutor(2) as pool:
        applied = [done.result() for done in [pool.submit(apply_schema, empty) for _ in range(2)]]
    names = [path.name for path in migration_files()]
    assert sorted(applied[0] + applied[1]) == sorted(names)
    with psycopg.connect(empty) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM schema_migrations ORDER BY name")] == sorted(names)
