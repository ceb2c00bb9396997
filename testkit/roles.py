"""Least-privilege roles for tests: unique per test run (Postgres roles are cluster-wide, RabbitMQ users
broker-wide), removed at the end. Needs what `walfeed bootstrap-roles` needs: a superuser admin connection and
rabbitmqctl with the broker's admin rights (root on this machine)."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator

import psycopg
from psycopg import sql

from services.cli import broker_users
from services.cli.roles import AMQP_PROCESSES, PROCESSES, RoleSettings, password_variables
from testkit.infra import Infra
from testkit.resources import unique


def role_environ(prefix: str) -> dict[str, str]:
    """Settings of `walfeed bootstrap-roles` for the role prefix, with fresh random passwords."""
    return {"WALFEED_ROLE_PREFIX": prefix, **{v: secrets.token_urlsafe(24) for v in password_variables()}}


@contextlib.contextmanager
def test_roles(infra: Infra) -> Iterator[RoleSettings]:
    """RoleSettings of a prefix of this run's own; at exit, drops whatever of them a bootstrap created."""
    settings = RoleSettings.from_env(role_environ(unique("wfr")))
    try:
        yield settings
    finally:
        drop_roles(infra, settings)


def drop_roles(infra: Infra, settings: RoleSettings) -> None:
    """Drop the Postgres roles (their databases must be gone) and delete the broker users."""
    roles = settings.roles
    with psycopg.connect(infra.pg_admin_url, autocommit=True) as conn:
        for role in (*(roles.login(p) for p in PROCESSES), roles.owner):
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
    broker = broker_users.admin(settings.rabbitmqctl, settings.management_url)
    for process in AMQP_PROCESSES:
        broker.delete_user(roles.login(process))
