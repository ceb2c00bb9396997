"""A private PostgreSQL 15 primary and streaming standbys, started and stopped by the tests.

The machine's own Postgres (127.0.0.1:5432) is shared with everyone and never touched: this starts its own
`postgres` processes on free ports, with data and socket dirs under one temp dir, as the `postgres` OS user when
run as root (initdb refuses root). It is a throwaway cluster: trust auth on 127.0.0.1 (replication too), fsync off.

    with pgcluster.provide() as cluster:          # a primary and one streaming standby
        url = cluster.migrated_database("slot")    # on the primary: schema + wal2json slot, as `walfeed migrate`
        standby = cluster.standbys[0]              # standby.url(dbname) reads it there once replayed
        cluster.wait_replayed(standby, cluster.current_lsn(cluster.primary))
        cluster.promote(standby)                   # now cluster.primary is the former standby

Everything is stopped and removed at the end, also after a failure; a run killed before its teardown leaves its
servers behind, and the next `provide()` stops and removes them (their owner pid, in the dir name, is gone).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psycopg

from services.core.migrate import apply_schema, ensure_database, ensure_slot
from testkit.processes import alive, free_port
from testkit.resources import unique
from testkit.waiting import eventually

BIN = Path(os.environ.get("WALFEED_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
_PREFIX = "walfeed-pgcluster-"
CONF = """
listen_addresses = '127.0.0.1'
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
hot_standby = on
hot_standby_feedback = on
wal_keep_size = '256MB'
fsync = off
wal_log_hints = on
shared_buffers = '32MB'
max_connections = 100
"""
HBA = """
local all         all                 trust
local replication all                 trust
host  all         all   127.0.0.1/32  trust
host  replication all   127.0.0.1/32  trust
"""


def dbname(url: str) -> str:
    """The database a connection URL names."""
    return str(psycopg.conninfo.conninfo_to_dict(url)["dbname"])


def missing() -> str | None:
    """Why this machine cannot run a private cluster, or None when it can (the fixtures' skip reason)."""
    for tool in ("initdb", "pg_ctl", "pg_basebackup", "postgres"):
        if not (BIN / tool).exists():
            return f"{BIN / tool} not found: install PostgreSQL 15 server binaries (or set WALFEED_TEST_PG_BIN)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without `runuser`: initdb refuses root"
    return None


@dataclass
class Node:
    name: str
    data_dir: Path
    port: int

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.name}.log"


class PgCluster:
    """One primary and its standbys under `root`; `primary` changes on promote()."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sockets = root / "sockets"
        self.nodes: list[Node] = []
        self.primary: Node = self._init_primary()

    @property
    def standbys(self) -> list[Node]:
        return [n for n in self.nodes if n is not self.primary]

    # --- lifecycle -------------------------------------------------------------------------------------------
    def _init_primary(self) -> Node:
        self.sockets.mkdir()
        _chown(self.root)
        _chown(self.sockets)
        node = self._node("primary")
        _run("initdb", "-D", str(node.data_dir), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8",
             "--locale=C")
        with open(node.data_dir / "postgresql.conf", "a") as conf:
            conf.write(CONF + _plugin_conf(node.data_dir) + self._node_conf(node))
        (node.data_dir / "pg_hba.conf").write_text(HBA)
        self.start(node)
        return node

    def add_standby(self) -> Node:
        """A streaming standby of the current primary (pg_basebackup -R), returned once it streams."""
        node = self._node(f"standby{len(self.nodes)}")
        _run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary.port), "-U", "postgres",
             "-D", str(node.data_dir), "-R", "-X", "stream", "-c", "fast", "--no-sync")
        with open(node.data_dir / "postgresql.conf", "a") as conf:
            conf.write(self._node_conf(node))  # later lines win over the primary's copied port
        self.start(node)
        self.wait_streaming(node)
        return node

    def start(self, node: Node) -> None:
        _run("pg_ctl", "start", "-w", "-t", "60", "-D", str(node.data_dir), "-l", str(node.log_path))

    def stop(self, node: Node, mode: Literal["fast", "immediate"] = "fast") -> None:
        """`immediate` is a crash: no shutdown checkpoint, recovery on the next start."""
        _run("pg_ctl", "stop", "-w", "-t", "60", "-D", str(node.data_dir), "-m", mode)

    def promote(self, standby: Node) -> None:
        """Promote `standby` (waits until it accepts writes); it becomes `self.primary`. Stop the old primary
        first when the test means a failover: this does not fence it."""
        _run("pg_ctl", "promote", "-w", "-t", "60", "-D", str(standby.data_dir))
        eventually(lambda: not self.in_recovery(standby) or None, timeout=60, what=f"{standby.name} promoted")
        self.primary = standby

    def migrated_database(self, slot: str | None = None) -> str:
        """A fresh database on the primary, migrated as `walfeed migrate` does (schema, then the wal2json slot
        unless `slot` is None). Returns its URL on the primary; the standbys get it by replay. It lives as long
        as the cluster."""
        name = unique("walfeed_pc")
        url = self.primary.url(name)
        ensure_database(url)
        apply_schema(url)
        if slot is not None:
            ensure_slot(url, slot)
        return url

    def close(self) -> None:
        for node in self.nodes:
            _kill(node.data_dir)
        shutil.rmtree(self.root, ignore_errors=True)

    # --- state -----------------------------------------------------------------------------------------------
    def in_recovery(self, node: Node) -> bool:
        return bool(self._one(node, "SELECT pg_is_in_recovery()"))

    def current_lsn(self, node: Node) -> str:
        """The primary's WAL insert position: every commit so far is at or before it."""
        return str(self._one(node, "SELECT pg_current_wal_insert_lsn()::text"))

    def wait_streaming(self, standby: Node) -> None:
        eventually(lambda: self._one(standby, "SELECT status = 'streaming' FROM pg_stat_wal_receiver"),
                   timeout=60, what=f"{standby.name} streaming from the primary")

    def wait_replayed(self, standby: Node, lsn: str) -> None:
        eventually(lambda: self._one(standby, "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)),
                   timeout=60, what=f"{standby.name} replayed {lsn}")

    def logs(self) -> str:
        return "\n".join(f"===== {n.name} ({n.log_path})\n{_tail(n.log_path)}" for n in self.nodes)

    # --- internals -------------------------------------------------------------------------------------------
    def _node(self, name: str) -> Node:
        node = Node(name, self.root / name, free_port())
        self.nodes.append(node)
        return node

    def _node_conf(self, node: Node) -> str:
        return f"\nport = {node.port}\nunix_socket_directories = '{self.sockets}'\ncluster_name = '{node.name}'\n"

    @staticmethod
    def _one(node: Node, query: str, params: tuple[object, ...] = ()) -> object:
        with psycopg.connect(node.url(), autocommit=True, connect_timeout=5) as conn:
            row = conn.execute(query, params).fetchone()
        return None if row is None else row[0]


@contextlib.contextmanager
def provide(standbys: int = 1) -> Iterator[PgCluster]:
    """A running primary with `standbys` streaming standbys; all stopped and removed on exit."""
    reap_stale()
    root = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))
    cluster: PgCluster | None = None
    try:
        cluster = PgCluster(root)
        for _ in range(standbys):
            cluster.add_standby()
        yield cluster
    finally:
        if cluster is not None:
            cluster.close()
        shutil.rmtree(root, ignore_errors=True)


def reap_stale() -> None:
    """Stop and remove clusters whose test run died before its teardown (its pid, in the dir name, is gone)."""
    for root in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*"):
        owner = root.name.removeprefix(_PREFIX).split("-", 1)[0]
        if owner.isdigit() and not alive(int(owner)):
            for pid_file in root.glob("*/postmaster.pid"):
                _kill(pid_file.parent)
            shutil.rmtree(root, ignore_errors=True)


def _kill(data_dir: Path) -> None:
    """Stop the postmaster of `data_dir` at once (SIGQUIT = immediate shutdown, then SIGKILL if it lingers)."""
    pid_file = data_dir / "postmaster.pid"
    with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
        pid = int(pid_file.read_text().splitlines()[0])
        for sig in (signal.SIGQUIT, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            with contextlib.suppress(AssertionError):
                eventually(lambda: not alive(pid), timeout=10, what=f"postmaster {pid} exited")
                return


def _plugin_conf(data_dir: Path) -> str:
    """Some builds (this machine's) load only the output plugins named in `output_plugin_libraries`: add wal2json
    there, as scripts/setup-infra.sh does for the machine's server. Builds without the setting need nothing."""
    try:
        current = _run("postgres", "-D", str(data_dir), "-C", "output_plugin_libraries").strip()
    except RuntimeError:
        return ""
    names = [n.strip() for n in current.split(",") if n.strip()]
    return f"output_plugin_libraries = '{', '.join([*names, 'wal2json'] if 'wal2json' not in names else names)}'\n"


def _as_postgres() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def _chown(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")


def _run(tool: str, *args: str) -> str:
    done = subprocess.run([*_as_postgres(), str(BIN / tool), *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=180, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-6000:] if path.exists() else ""
