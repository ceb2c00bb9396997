"""Where the tests find PostgreSQL and RabbitMQ.

`WALFEED_TEST_INFRA`:
  - `local` : the machine's services (scripts/setup-infra.sh prepares them);
  - `docker`: throwaway containers through testcontainers (needs a Docker engine);
  - `auto` (default): local when 127.0.0.1:5432 and :5672 answer, else docker when an engine is reachable.
`WALFEED_TEST_PG_URL` / `WALFEED_TEST_AMQP_URL` override the local addresses (an admin connection: the harness
creates and drops databases through it).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg


@dataclass(frozen=True)
class Infra:
    pg_admin_url: str  # superuser connection to the maintenance database
    amqp_url: str

    def db_url(self, dbname: str) -> str:
        return psycopg.conninfo.make_conninfo(self.pg_admin_url, dbname=dbname)


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _docker_available() -> bool:
    try:
        import docker

        docker.from_env().ping()
        return True
    except Exception:
        return False


@contextlib.contextmanager
def provide() -> Iterator[Infra]:
    mode = os.environ.get("WALFEED_TEST_INFRA", "auto")
    local = Infra(
        pg_admin_url=os.environ.get("WALFEED_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
        amqp_url=os.environ.get("WALFEED_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F"),
    )
    if mode == "local" or (mode == "auto" and _reachable("127.0.0.1", 5432) and _reachable("127.0.0.1", 5672)):
        check_postgres(local.pg_admin_url)
        yield local
        return
    if mode not in ("auto", "docker"):
        raise RuntimeError(f"WALFEED_TEST_INFRA={mode!r} is invalid: use local, docker or auto")
    if not _docker_available():
        raise RuntimeError(
            "no PostgreSQL/RabbitMQ on 127.0.0.1 and no Docker engine: run scripts/setup-infra.sh "
            "(or scripts/test, which runs it)"
        )
    with _containers() as infra:
        yield infra


@contextlib.contextmanager
def _containers() -> Iterator[Infra]:
    from testcontainers.postgres import PostgresContainer
    from testcontainers.rabbitmq import RabbitMqContainer

    # debezium/postgres ships wal2json and runs with wal_level=logical.
    with PostgresContainer("debezium/postgres:15", username="postgres", password="postgres",
                           dbname="postgres", driver=None) as pg, \
            RabbitMqContainer("rabbitmq:3.10-management") as mq:
        pg_url = pg.get_connection_url()
        amqp_url = (f"amqp://guest:guest@{mq.get_container_host_ip()}:"
                    f"{mq.get_exposed_port(5672)}/%2F")
        check_postgres(pg_url)
        yield Infra(pg_admin_url=pg_url, amqp_url=amqp_url)


def check_postgres(url: str) -> None:
    """Fail early, with the fix, when the server cannot do logical decoding with wal2json."""
    with psycopg.connect(url, autocommit=True) as conn:
        wal_level = conn.execute("SHOW wal_level").fetchone()[0]  # type: ignore[index]
        if wal_level != "logical":
            raise RuntimeError(f"PostgreSQL at {url} has wal_level={wal_level}; run scripts/setup-infra.sh")
        try:  # a temporary slot disappears with this session
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'wal2json', true)",
                         (f"walfeed_probe_{os.getpid()}",))
        except psycopg.Error as exc:
            raise RuntimeError(f"cannot create a wal2json slot ({exc}); run scripts/setup-infra.sh") from None
