"""Who each walfeed process is to Postgres and RabbitMQ, and what it may do there (docs/adr/0060). Pure: no I/O.

Postgres roles (cluster-wide), from one prefix (`WALFEED_ROLE_PREFIX`, default `walfeed`):
`{prefix}_owner` owns the database and its schema and cannot log in (migrations `SET ROLE` to it);
`{prefix}_api`, `{prefix}_relay`, `{prefix}_worker`, `{prefix}_notifier`, `{prefix}_delivery`, `{prefix}_embedder`
log in, own nothing, and hold the grants of db/roles/grants.sql. RabbitMQ users (broker-wide): `{prefix}_relay`,
`{prefix}_worker`, `{prefix}_notifier`, `{prefix}_delivery` and `{prefix}_embedder`, with the permissions of
`amqp_permissions`.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from psycopg.conninfo import make_conninfo

from services.core import queues
from services.core.settings import Declared, Env, OptionalStr, Secret, SettingsError, Str
from services.core.topology import DELIVERY_CHANNELS, Topology

PROCESSES: Final = ("api", "relay", "worker", "notifier", "delivery", "embedder")
# the api reads events for the Mastodon live stream only (services/api/mastodon/stream_queue.py, docs/adr/0140)
AMQP_PROCESSES: Final = ("api", "relay", "worker", "notifier", "delivery", "embedder")

# Each login role's statement_timeout: well above the longest statement the process runs normally, so a runaway
# statement (a lock queue, a bad plan) is cut off instead of holding a connection and its locks.
STATEMENT_TIMEOUTS: Final[Mapping[str, str]] = {
    "api": "5s",      # single-row writes and index-bounded reads
    "relay": "30s",   # poll claims and marks of one batch; the walsender's stream is not a statement
    "worker": "60s",  # one fan-out chunk, a backfill or a trim of a batch of timelines
    "notifier": "30s",  # one batch of notifications with their deliveries (index lookups and inserts)
    "delivery": "10s",  # single-row reads and updates by key; the HTTP or SMTP call holds no statement open
    "embedder": "30s",  # one batch of bodies by id, one upsert of their vectors, a backfill's scan of a batch
}

MIN_PASSWORD_LENGTH: Final = 16
_PREFIX = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


@dataclass(frozen=True, slots=True)
class Roles:
    prefix: str

    @property
    def owner(self) -> str:
        return f"{self.prefix}_owner"

    def login(self, process: str) -> str:
        """The Postgres role, and for the relay and the worker also the RabbitMQ user, of `process`."""
        if process not in PROCESSES:
            raise ValueError(f"unknown process {process!r}")
        return f"{self.prefix}_{process}"


def db_password_variable(process: str) -> str:
    return f"WALFEED_{process.upper()}_DB_PASSWORD"


def amqp_password_variable(process: str) -> str:
    return f"WALFEED_{process.upper()}_AMQP_PASSWORD"


def password_variables() -> tuple[str, ...]:
    return (*map(db_password_variable, PROCESSES), *map(amqp_password_variable, AMQP_PROCESSES))


_WHOSE: Final = {"api": "the api's", "relay": "the relay's", "worker": "the worker's", "notifier": "the notifier's",
                 "delivery": "the delivery workers'", "embedder": "the embedder's"}
ROLE_PREFIX: Final = Str("WALFEED_ROLE_PREFIX", "walfeed",
                         "prefix of the role and broker user names (`{prefix}_api`, ...)", _PREFIX)
DB_PASSWORDS: Final = {p: Secret(db_password_variable(p), f"password of {_WHOSE[p]} Postgres role", MIN_PASSWORD_LENGTH)
                       for p in PROCESSES}
AMQP_PASSWORDS: Final = {p: Secret(amqp_password_variable(p), f"password of {_WHOSE[p]} broker user",
                                   MIN_PASSWORD_LENGTH) for p in AMQP_PROCESSES}
RABBITMQCTL: Final = Str("WALFEED_RABBITMQCTL", "rabbitmqctl",
                         "how to run rabbitmqctl with the broker's admin rights, e.g. `sudo rabbitmqctl`")
MANAGEMENT_URL: Final = OptionalStr(
    "WALFEED_RABBITMQ_MANAGEMENT_URL", "instead of rabbitmqctl: the management API with an administrator's credentials",
    allowed="an `http://` or `https://` URL")
SETTINGS: Final[tuple[Declared, ...]] = (
    ROLE_PREFIX, *DB_PASSWORDS.values(), *AMQP_PASSWORDS.values(), RABBITMQCTL, MANAGEMENT_URL)


@dataclass(frozen=True, slots=True)
class RoleSettings:
    """What `walfeed bootstrap-roles` needs beyond the shared settings. Passwords have no default."""

    roles: Roles
    db_passwords: Mapping[str, str]
    amqp_passwords: Mapping[str, str]
    rabbitmqctl: str  # the broker's admin command, e.g. `sudo rabbitmqctl`
    management_url: str | None  # management API URL with admin credentials, instead of rabbitmqctl

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RoleSettings:
        env = Env(environ)
        management = MANAGEMENT_URL.read(env)
        if management is not None and not management.startswith(("http://", "https://")):
            raise SettingsError(f"{MANAGEMENT_URL.name} is invalid: expected http(s)://user:password@host:port "
                                "(its value is not repeated here: it holds the broker administrator's password)")
        return cls(
            roles=Roles(ROLE_PREFIX.read(env)),
            db_passwords={p: secret.read(env) for p, secret in DB_PASSWORDS.items()},
            amqp_passwords={p: secret.read(env) for p, secret in AMQP_PASSWORDS.items()},
            rabbitmqctl=RABBITMQCTL.read(env),
            management_url=management,
        )


@dataclass(frozen=True, slots=True)
class Permissions:
    """RabbitMQ's configure / write / read regular expressions of one user in one virtual host."""

    configure: str
    write: str
    read: str


NOTHING: Final = "^$"


def _exactly(*names: str) -> str:
    return "^(" + "|".join(re.escape(n) for n in names) + ")$"


def amqp_permissions(topology: Topology, queue_type: str = queues.CLASSIC) -> dict[str, Permissions]:
    """Per process, what RabbitMQ lets it do (operation -> permission table of RabbitMQ's access control guide).

    relay: declare (configure) and publish to (write) the events exchange and the grouped exchange; read nothing.
    worker: declare its topology: the three exchanges and its three queues (configure); bind its queues (write on
    each queue, read on the exchange bound from: the grouped one; and the events exchange, to unbind, ADR 0115);
    consume the fan-out queue (read); declare the retry queue with the settle exchange as dead-letter exchange
    (read on the queue, write on the exchange); publish retry copies and dead letters to the settle exchange
    (write). No right on the default exchange: a publish there is checked
    against amq.default only, not against the queue named by the routing key, so it would reach any queue of the
    vhost (docs/adr/0060).
    notifier: as the worker, on its own queues and settle exchange; and declare (configure) and bind (write) the
    delivery work queues, which it never reads: the delivery events it writes must never be unroutable (ADR 0080).
    delivery: the same for both channels' queues and the deliveries settle exchange (docs/adr/0081).
    api: declare the events exchange (configure, as every process that binds there) and its live-stream queues
    `{prefix}.stream.<hex>` (configure); bind them (write on the queue, read on the events exchange) and consume
    them (read); publish nothing (docs/adr/0140).
    embedder: declare (configure) the grouped exchange and its one queue, bind it there (write on the queue, read on
    the exchange) and consume it (read); it publishes nothing.
    With quorum queues (docs/adr/0090) a delivery work queue dead-letters into its dead queue through the deliveries
    settle exchange, and the broker lets a process declare it so only with read on the queue and write on that
    exchange: the notifier gets both (it still never consumes them).
    """
    t = topology
    n = t.notifier
    work = [t.delivery_queue(channel) for channel in DELIVERY_CHANNELS]
    deliveries = (t.delivery_settle_exchange, *t.all_delivery_queues())
    dead_lettering = [t.delivery_settle_exchange, *work] if queue_type == queues.QUORUM else []
    stream = re.escape(t.stream_queue_prefix) + r"[0-9a-f]+"  # the api processes' queues (stream_queue.py)
    return {
        "api": Permissions(configure=f"^({re.escape(t.events_exchange)}|{stream})$", write=f"^{stream}$",
                           read=f"^({re.escape(t.events_exchange)}|{stream})$"),
        "relay": Permissions(configure=_exactly(t.events_exchange, t.grouped_exchange),
                             write=_exactly(t.events_exchange, t.grouped_exchange), read=NOTHING),
        "worker": Permissions(
            configure=_exactly(*t.exchanges(), *t.queues()),
            write=_exactly(t.settle_exchange, *t.queues()),
            read=_exactly(*t.exchanges(), *t.queues()),
        ),
        "notifier": Permissions(
            configure=_exactly(*n.exchanges(), *n.queues(), *work),
            write=_exactly(n.settle_exchange, *n.queues(), *work, *dead_lettering[:1]),
            read=_exactly(*n.exchanges(), *n.queues(), *dead_lettering[1:]),
        ),
        "delivery": Permissions(
            configure=_exactly(t.events_exchange, *deliveries),
            write=_exactly(*deliveries),
            read=_exactly(t.events_exchange, *deliveries),
        ),
        "embedder": Permissions(
            configure=_exactly(t.grouped_exchange, t.embedder_queue),
            write=_exactly(t.embedder_queue),
            read=_exactly(t.grouped_exchange, t.embedder_queue),
        ),
    }


def process_environ(environ: Mapping[str, str], database_url: str, amqp_url: str, settings: RoleSettings,
                    process: str) -> dict[str, str]:
    """The environment of one process run under its role: `environ` without the bootstrap's secrets, and
    WALFEED_DATABASE_URL / WALFEED_AMQP_URL with the process's own credentials instead of the admin's."""
    secrets = {*password_variables(), "WALFEED_RABBITMQ_MANAGEMENT_URL"}
    child = {k: v for k, v in environ.items() if k not in secrets}
    role = settings.roles.login(process)
    child["WALFEED_DATABASE_URL"] = make_conninfo(database_url, user=role, password=settings.db_passwords[process])
    amqp_password = settings.amqp_passwords.get(process)
    child["WALFEED_AMQP_URL"] = with_credentials(amqp_url, role if amqp_password else None, amqp_password)
    return child


def with_credentials(amqp_url: str, user: str | None, password: str | None) -> str:
    """`amqp_url` with these credentials (None: none, for a process that never connects to the broker), on each of
    its nodes (services/core/nodes.py); also used on the management API's http URL."""
    return ",".join(_node_with_credentials(node.strip(), user, password) for node in amqp_url.split(","))


def _node_with_credentials(amqp_url: str, user: str | None, password: str | None) -> str:
    parts = urllib.parse.urlsplit(amqp_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    if user is not None:
        host = f"{urllib.parse.quote(user, safe='')}:{urllib.parse.quote(password or '', safe='')}@{host}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
