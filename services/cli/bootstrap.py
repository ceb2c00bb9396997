"""`walfeed bootstrap-roles`: the least-privilege set-up (docs/adr/0060), idempotent.

With a Postgres superuser as WALFEED_DATABASE_URL and the broker's admin rights (services.cli.broker_users):
  1. the database, if missing;
  2. the roles `{prefix}_owner` (NOLOGIN), `{prefix}_api`, `{prefix}_relay` (REPLICATION), `{prefix}_worker`,
     `{prefix}_notifier`, `{prefix}_delivery`, with their passwords and statement_timeout;
  3. the database and its objects owned by `{prefix}_owner`; the migrations applied as that role;
  4. db/roles/grants.sql; the replication slot (unless --no-slot);
  5. the RabbitMQ users `{prefix}_relay`, `{prefix}_worker`, `{prefix}_notifier` and `{prefix}_delivery` with
     permissions on their AMQP names only.
Then each process runs with its own WALFEED_DATABASE_URL / WALFEED_AMQP_URL (`walfeed up` builds them).
"""

from __future__ import annotations

import sys

import psycopg

from services.cli import broker_users, pg_roles
from services.cli.broker_users import BrokerAdminError
from services.cli.roles import AMQP_PROCESSES, PROCESSES, RoleSettings, amqp_permissions
from services.core.migrate import MigrationError, apply_schema, ensure_database, ensure_slot
from services.core.settings import Settings
from services.core.topology import Topology


def bootstrap(settings: Settings, roles: RoleSettings, *, slot: bool = True) -> None:
    """Raises MigrationError, BrokerAdminError or psycopg.Error."""
    url = settings.database_url
    ensure_database(url)
    pg_roles.ensure_roles(url, roles.roles, roles.db_passwords)
    pg_roles.take_ownership(url, roles.roles)
    apply_schema(url, role=roles.roles.owner)
    pg_roles.apply_grants(url, roles.roles)
    if slot:
        ensure_slot(url, settings.slot)
    broker = broker_users.admin(roles.rabbitmqctl, roles.management_url)
    vhost = broker_users.vhost_of(settings.amqp_url)
    permissions = amqp_permissions(Topology(settings.amqp_prefix), settings.amqp_queue_type)
    for process in AMQP_PROCESSES:
        broker.ensure_user(roles.roles.login(process), roles.amqp_passwords[process], vhost, permissions[process])


def run(settings: Settings, roles: RoleSettings | None = None, *, slot: bool = True) -> int:
    roles = roles or RoleSettings.from_env()
    try:
        bootstrap(settings, roles, slot=slot)
    except psycopg.errors.InsufficientPrivilege as exc:
        print(f"walfeed bootstrap-roles: {str(exc).strip()}: WALFEED_DATABASE_URL must be a superuser "
              "(only a superuser may create the relay's REPLICATION role)", file=sys.stderr)
        return 1
    except (MigrationError, BrokerAdminError, psycopg.Error) as exc:
        print(f"walfeed bootstrap-roles: {str(exc).strip()}", file=sys.stderr)
        return 1
    names = ", ".join(roles.roles.login(p) for p in PROCESSES)
    print(f"roles: {roles.roles.owner} owns the schema; {names} log in with their passwords")
    print(f"broker users: {', '.join(roles.roles.login(p) for p in AMQP_PROCESSES)}")
    return 0
