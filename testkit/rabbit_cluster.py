"""A real RabbitMQ cluster of three nodes on this machine, for tests that need one (docs/adr/0090).

Three `rabbitmq-server` processes, each with its own node name (`wfc1_<pid>@localhost`...), AMQP port, Erlang
distribution port, data, log and plugin files in a temporary directory, and an Erlang cookie of their own (in
`$HOME/.erlang.cookie`, HOME being that directory: the server and `rabbitmqctl` both read it there). They leave
alone the machine's own node (rabbit@localhost, 5672) and its files: our own rabbitmq-env.conf and rabbitmq.conf
replace those of /etc/rabbitmq. They share the machine's epmd (it maps node names to ports). rabbitmq-server runs
as root when HOME is set. Nodes 2 and 3 join node 1 (`stop_app`, `join_cluster`, `start_app`). The default user
guest may log in from 127.0.0.1, where the nodes listen.

`RabbitCluster.start()` takes ~15 s on a quiet 2-core machine; `close()` stops the nodes and deletes the directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from testkit.processes import free_port
from testkit.waiting import eventually

SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
CTL = "/usr/lib/rabbitmq/bin/rabbitmqctl"
NODES = 3  # a quorum queue keeps its majority with one node down
START_TIMEOUT = 120.0  # seconds for one node to boot on a busy machine


def available() -> str | None:
    """Why a cluster cannot be started here, or None when it can."""
    for tool in (SERVER, CTL):
        if not os.access(tool, os.X_OK):
            return f"{tool} not found: install rabbitmq-server (scripts/setup-infra.sh)"
    return None


@dataclass
class Node:
    name: str  # wfc1_<pid>@localhost
    port: int  # AMQP
    dist_port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class RabbitCluster:
    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="walfeed-rabbit-cluster-"))
        suffix = os.getpid()
        self.nodes = [Node(f"wfc{i}_{suffix}@localhost", free_port(), free_port()) for i in range(1, NODES + 1)]
        cookie = self.base / ".erlang.cookie"
        cookie.write_text(secrets.token_hex(20))
        cookie.chmod(0o400)
        (self.base / "rabbitmq-env.conf").write_text("")  # not /etc/rabbitmq's, which names the system node
        (self.base / "enabled_plugins").write_text("[].\n")  # no prometheus plugin: its port is the system node's

    @property
    def url(self) -> str:
        """WALFEED_AMQP_URL for the whole cluster: every node's URL, comma-separated."""
        return ",".join(node.url for node in self.nodes)

    def _env(self, node: Node | None = None) -> dict[str, str]:
        env = {**os.environ, "HOME": str(self.base), "RABBITMQ_CONF_ENV_FILE": str(self.base / "rabbitmq-env.conf"),
               "ERL_EPMD_ADDRESS": "127.0.0.1"}
        if node is not None:
            short = node.name.split("@")[0]
            conf = self.base / f"{short}.conf"
            conf.write_text(f"listeners.tcp.1 = 127.0.0.1:{node.port}\n")
            env.update({
                "RABBITMQ_NODENAME": node.name, "RABBITMQ_NODE_PORT": str(node.port),
                "RABBITMQ_DIST_PORT": str(node.dist_port), "RABBITMQ_CONFIG_FILE": str(conf),
                "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.base / f"{short}.advanced.config"),
                "RABBITMQ_MNESIA_BASE": str(self.base / "mnesia"), "RABBITMQ_LOG_BASE": str(self.base / "log"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.base / "enabled_plugins"),
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            })
        return env

    def ctl(self, node: Node, *args: str, timeout: float = 60.0) -> str:
        """`rabbitmqctl -n node args...`; raises with its output on failure."""
        done = subprocess.run([CTL, "-n", node.name, *args], env=self._env(), capture_output=True, text=True,
                              timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl -n {node.name} {' '.join(args)}: {done.stdout}{done.stderr}")
        return done.stdout

    def boot(self, node: Node) -> None:
        """Start the node's server process (again, after `kill`/`stop`: it rejoins with its data)."""
        assert not node.running(), f"{node.name} is running"
        log = open(self.base / f"{node.name.split('@')[0]}.out", "ab")  # noqa: SIM115 - the child's from here on
        node.process = subprocess.Popen([SERVER], env=self._env(node), stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()

    def await_running(self, node: Node) -> None:
        def up() -> bool:
            assert node.running(), f"{node.name} exited: {self.output(node)[-2000:]}"
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self.ctl(node, "await_startup", "--timeout", "5", timeout=15)
                return True
            return False

        eventually(up, timeout=START_TIMEOUT, interval=0.5, what=f"{node.name} started")

    def start(self) -> RabbitCluster:
        for node in self.nodes:
            self.boot(node)
        for node in self.nodes:
            self.await_running(node)
        first = self.nodes[0]
        for node in self.nodes[1:]:
            self.ctl(node, "stop_app")
            self.ctl(node, "join_cluster", first.name)
            self.ctl(node, "start_app")
        eventually(lambda: len(self.running_nodes(first)) == len(self.nodes), timeout=60,
                   what="every node running in the cluster")
        return self

    def running_nodes(self, via: Node) -> list[str]:
        status = json.loads(self.ctl(via, "cluster_status", "--formatter", "json"))
        return list(status.get("running_nodes", []))

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def any_running(self) -> Node:
        return next(n for n in self.nodes if n.running())

    def leaders(self, queues: Sequence[str] | None = None) -> dict[str, str]:
        """Queue name -> node name of its leader (quorum queues) or home node (classic), asked of a running node."""
        rows = json.loads(self.ctl(self.any_running(), "list_queues", "name", "leader", "--formatter", "json",
                                   "--quiet"))
        found = {row["name"]: row.get("leader", "") for row in rows}
        return found if queues is None else {q: found[q] for q in queues if q in found}

    def kill(self, node: Node) -> None:
        """SIGKILL the node's Erlang VM: a crash, nothing flushed or handed over."""
        assert node.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.process.pid, signal.SIGKILL)
        node.process.wait(timeout=30)

    def stop(self, node: Node) -> None:
        """A clean shutdown of the node (`rabbitmqctl stop`)."""
        assert node.process is not None
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self.ctl(node, "stop", timeout=60)
        try:
            node.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill(node)

    def output(self, node: Node) -> str:
        path = self.base / f"{node.name.split('@')[0]}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        for node in self.nodes:
            if node.running():
                self.stop(node)
        shutil.rmtree(self.base, ignore_errors=True)


@contextlib.contextmanager
def cluster() -> Iterator[RabbitCluster]:
    started = RabbitCluster()
    try:
        yield started.start()
    finally:
        started.close()
