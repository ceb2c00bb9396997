"""Fixtures of the least-privilege tests: this run's roles and broker users, bootstrapped on each test's database."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from services.cli import bootstrap
from services.cli.roles import RoleSettings, process_environ
from services.core.settings import Settings
from testkit import roles
from testkit.infra import Infra

pytestmark = pytest.mark.integration

# The environment of one process under its role: WALFEED_DATABASE_URL / WALFEED_AMQP_URL with its credentials.
RoleEnv = Callable[[str], dict[str, str]]


@pytest.fixture(scope="session")
def role_settings(infra: Infra) -> Iterator[RoleSettings]:
    with roles.test_roles(infra) as settings:
        yield settings


@pytest.fixture
def role_env(settings: Settings, walfeed_env: dict[str, str], role_settings: RoleSettings) -> RoleEnv:
    """Runs the bootstrap on this test's database and AMQP prefix (as an operator on an existing install: the
    clone was migrated by the superuser), then hands out each process's environment."""
    bootstrap.bootstrap(settings, role_settings, slot=False)  # the test's slot exists already

    def env(process: str) -> dict[str, str]:
        return process_environ(walfeed_env, settings.database_url, settings.amqp_url, role_settings, process)

    return env
