"""Fixtures of the walfeed test harness. See testkit/ for the pieces.

Per test: `walfeed_env` gives a fresh database (schema + its own wal2json slot) and its own AMQP prefix;
`processes` starts real `walfeed` subprocesses with that environment and kills leftovers at teardown.
`pg_cluster` / `fresh_pg_cluster`: a private Postgres primary with a streaming standby (testkit/pgcluster.py).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from services.core.settings import Settings
from services.core.topology import Topology
from testkit import infra as infra_mod
from testkit import pgcluster, resources
from testkit import rabbit_cluster as rabbit_cluster_mod
from testkit.infra import Infra
from testkit.processes import Processes


@pytest.fixture(scope="session")
def infra() -> Iterator[Infra]:
    with infra_mod.provide() as provided:
        yield provided


@pytest.fixture(scope="session")
def rabbit_cluster() -> Iterator[rabbit_cluster_mod.RabbitCluster]:
    """A RabbitMQ cluster of three nodes of its own (testkit/rabbit_cluster.py), started when a test first asks for
    it, stopped and deleted at the end of the session."""
    why = rabbit_cluster_mod.available()
    if why is not None:
        pytest.skip(why)
    with rabbit_cluster_mod.cluster() as started:
        yield started


@pytest.fixture(scope="session")
def template_db(infra: Infra) -> Iterator[str]:
    with resources.template_database(infra) as name:
        yield name


@pytest.fixture
def slot_name() -> str:
    return resources.unique("t")


@pytest.fixture
def database_url(infra: Infra, template_db: str, slot_name: str) -> Iterator[str]:
    """A migrated database of this test's own, with its logical slot created (as `walfeed migrate` does)."""
    with resources.test_database(infra, template_db, slot_name) as url:
        yield url


@pytest.fixture
def amqp_extra_queues() -> list[str]:
    """Queues a test declares under its prefix beyond the topology's (observers): append them here and
    `amqp_prefix` deletes them with the topology at teardown, also when the test fails."""
    return []


@pytest.fixture
def amqp_prefix(infra: Infra, amqp_extra_queues: list[str]) -> Iterator[str]:
    prefix = resources.unique("wft")
    yield prefix
    resources.delete_amqp_names(infra.amqp_url, Topology(prefix), amqp_extra_queues)


@pytest.fixture
def walfeed_env(infra: Infra, database_url: str, amqp_prefix: str, slot_name: str) -> dict[str, str]:
    """The environment of this test's walfeed processes."""
    return {
        "WALFEED_DATABASE_URL": database_url,
        "WALFEED_AMQP_URL": infra.amqp_url,
        "WALFEED_AMQP_PREFIX": amqp_prefix,
        "WALFEED_SLOT": slot_name,
        "WALFEED_CELEBRITY_THRESHOLD": "10000",
        "WALFEED_LOG_LEVEL": "INFO",
        # The api's rate limits are off for the real processes tests start (chaos clients write fast); tests of
        # the limits set them (tests/integration/api/test_ratelimit.py).
        "WALFEED_API_SIGNUP_LIMIT": "0",
        "WALFEED_API_WRITE_LIMIT": "0",
        "WALFEED_API_SEARCH_LIMIT": "0",  # tests poll searches until a post is found
        # One api worker process (the default is one per CPU): the tests of several set it (test_process.py).
        "WALFEED_API_WORKERS": "1",
    }


@pytest.fixture
def settings(walfeed_env: dict[str, str]) -> Settings:
    return Settings.from_env(walfeed_env)


@pytest.fixture
def topology(amqp_prefix: str) -> Topology:
    return Topology(amqp_prefix)


@pytest.fixture
def processes(walfeed_env: dict[str, str], tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Processes]:
    procs = Processes(walfeed_env, tmp_path)
    yield procs
    procs.kill_all()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(procs.logs())


def _pg_cluster(request: pytest.FixtureRequest) -> Iterator[pgcluster.PgCluster]:
    reason = pgcluster.missing()
    if reason:
        pytest.skip(f"no private Postgres cluster: {reason}")
    with pgcluster.provide(standbys=1) as cluster:
        yield cluster
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(cluster.logs())


@pytest.fixture(scope="module")
def pg_cluster(request: pytest.FixtureRequest) -> Iterator[pgcluster.PgCluster]:
    """A private primary + one streaming standby shared by a test module (the machine's Postgres is untouched).
    Tests that promote or stop a node take `fresh_pg_cluster`; each test makes its own database on it
    (`pg_cluster.migrated_database(slot)`)."""
    yield from _pg_cluster(request)


@pytest.fixture
def fresh_pg_cluster(request: pytest.FixtureRequest) -> Iterator[pgcluster.PgCluster]:
    """A private primary + one streaming standby of this test's own: promote, crash or stop nodes freely."""
    yield from _pg_cluster(request)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item,
                               call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture
def db(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection to this test's database (tuple rows, transactions: roll back or commit between reads)."""
    with psycopg.connect(database_url) as conn:
        yield conn
