"""Carrying out faults on the running system: processes, the broker, Postgres, and TCP proxies."""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg

from testkit.processes import Process
from testkit.proxy import TcpProxy
from tests.chaos.schedule import Fault

log = logging.getLogger("chaos")

NORMAL_WATERMARK = "0.4"  # RabbitMQ's default vm_memory_high_watermark, restored after an alarm


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


def _local_cluster() -> tuple[str, str]:
    out = subprocess.run(["pg_lsclusters", "-h"], check=True, capture_output=True, text=True).stdout.split()
    return out[0], out[1]


@dataclass
class Targets:
    relays: list[Process]
    workers: list[Process]
    api: Process
    relay_db: TcpProxy
    relay_amqp: TcpProxy
    worker_amqp: TcpProxy
    admin_url: str
    slot: str
    restart_api: Callable[[], None]
    done: list[Fault] = field(default_factory=list)

    def ensure_running(self) -> None:
        for proc in [*self.relays, *self.workers]:
            if not proc.running():
                proc.start()
        if not self.api.running():
            self.restart_api()

    def apply(self, fault: Fault) -> None:
        log.warning("fault %s", fault)
        getattr(self, fault.kind)(fault)
        self.done.append(fault)

    # --- processes
    def kill_relay(self, fault: Fault) -> None:
        relay = self.relays[fault.target % len(self.relays)]
        relay.kill()
        relay.start()

    def kill_worker(self, fault: Fault) -> None:
        worker = self.workers[fault.target % len(self.workers)]
        worker.kill()
        worker.start()

    def kill_api(self, fault: Fault) -> None:
        self.api.kill()
        self.restart_api()

    # --- broker
    def restart_broker(self, fault: Fault) -> None:
        _run("rabbitmqctl", "-q", "stop_app")
        _run("rabbitmqctl", "-q", "start_app")

    def memory_alarm(self, fault: Fault) -> None:
        _run("rabbitmqctl", "-q", "set_vm_memory_high_watermark", "0.000001")
        try:
            time.sleep(fault.hold)  # the fault's duration: publishers stay blocked this long
        finally:
            _run("rabbitmqctl", "-q", "set_vm_memory_high_watermark", NORMAL_WATERMARK)

    # --- postgres
    def restart_postgres(self, fault: Fault) -> None:
        version, cluster = _local_cluster()
        _run("pg_ctlcluster", "--skip-systemctl-redirect", version, cluster, "stop", "-m", "immediate")
        _run("pg_ctlcluster", "--skip-systemctl-redirect", version, cluster, "start")

    def kill_walsender(self, fault: Fault) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                         "WHERE slot_name = %s AND active_pid IS NOT NULL", (self.slot,))

    # --- network
    def cut_relay_db(self, fault: Fault) -> None:
        self.relay_db.cut()

    def cut_worker_amqp(self, fault: Fault) -> None:
        self.worker_amqp.cut()

    def stall_relay_amqp(self, fault: Fault) -> None:
        self.relay_amqp.stall()
        try:
            time.sleep(fault.hold)  # the fault's duration
        finally:
            self.relay_amqp.resume()
