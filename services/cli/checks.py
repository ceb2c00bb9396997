"""Infrastructure checks shared by `walfeed up` and `walfeed status`: each problem says what to do."""

from __future__ import annotations

import contextlib

import pika
import pika.exceptions
import psycopg

from services.core.amqp import node_parameters
from services.core.settings import Settings


def check_infrastructure(settings: Settings) -> list[str]:
    problems: list[str] = []
    admin = psycopg.conninfo.make_conninfo(settings.database_url, dbname="postgres")
    try:
        with psycopg.connect(admin, connect_timeout=5) as conn:
            wal_level = conn.execute("SHOW wal_level").fetchone()
            if wal_level is None or wal_level[0] != "logical":
                problems.append(f"PostgreSQL runs with wal_level={wal_level and wal_level[0]}, walfeed needs logical")
    except psycopg.OperationalError as exc:
        problems.append(f"PostgreSQL unreachable (WALFEED_DATABASE_URL): {str(exc).strip()}")
    try:
        conn = pika.BlockingConnection(node_parameters(settings.amqp_url, name="walfeed-check"))
        with contextlib.suppress(pika.exceptions.AMQPError):
            conn.close()
    except pika.exceptions.AMQPError as exc:
        problems.append(f"RabbitMQ unreachable (WALFEED_AMQP_URL): {exc!r}")
    return problems
