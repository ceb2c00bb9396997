"""Readiness as systemd sees it (deploy/systemd, Type=notify): the real api, relay (streaming and standby) and
worker, each given a $NOTIFY_SOCKET of the test's own, say READY=1 once they do their job, and the relay and the
worker STOPPING=1 when SIGTERM makes them drain."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from services.core import sdnotify
from testkit.processes import Processes, free_port
from testkit.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


class NotifySocket:
    """What systemd listens on: a datagram socket; each datagram is newline-separated KEY=VALUE fields."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(str(path))

    def expect(self, field: str, timeout: float = 60) -> dict[str, str]:
        """The first notification with `field` (e.g. READY=1), within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        seen = []
        while (left := deadline - time.monotonic()) > 0:
            self._sock.settimeout(left)
            try:
                data = self._sock.recv(4096).decode()
            except TimeoutError:
                break
            seen.append(data)
            fields = dict(line.split("=", 1) for line in data.splitlines())
            if field in data.splitlines():
                return fields
        raise AssertionError(f"no {field} within {timeout}s; received {seen}")

    def close(self) -> None:
        self._sock.close()


@pytest.fixture
def notify() -> Iterator[dict[str, NotifySocket]]:
    sockets: dict[str, NotifySocket] = {}
    yield sockets
    for s in sockets.values():
        s.close()


def _socket(notify: dict[str, NotifySocket], tmp_path: Path, name: str) -> dict[str, str]:
    notify[name] = NotifySocket(tmp_path / f"{name}.notify")
    return {"NOTIFY_SOCKET": str(notify[name].path)}


def test_each_process_says_ready_when_it_does_its_job_and_stopping_when_it_drains(
        processes: Processes, notify: dict[str, NotifySocket], tmp_path: Path) -> None:
    port = free_port()
    worker = processes.start("worker", "worker", env={**_socket(notify, tmp_path, "worker"),
                                                      "WALFEED_WORKER_METRICS_PORT": "0"})
    assert "consuming" in notify["worker"].expect("READY=1")["STATUS"]

    relay = processes.start("relay", "relay", env={**_socket(notify, tmp_path, "relay"),
                                                   "WALFEED_RELAY_METRICS_PORT": "0"})
    assert notify["relay"].expect("READY=1")["STATUS"].startswith("streaming slot ")
    standby = processes.start("standby", "relay", env={**_socket(notify, tmp_path, "standby"),
                                                       "WALFEED_RELAY_METRICS_PORT": "0"})
    assert notify["standby"].expect("READY=1")["STATUS"].startswith("standby")

    api = processes.start("api", "api", "--port", str(port), env=_socket(notify, tmp_path, "api"))
    assert notify["api"].expect("READY=1")["STATUS"] == f"serving on 127.0.0.1:{port}"
    assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200  # ready means serving

    for proc, name in ((worker, "worker"), (relay, "relay")):
        proc.send(signal.SIGTERM)
        assert notify[name].expect("STOPPING=1")["STATUS"]
        assert proc.wait(30) == 0, proc.log()[-3000:]
    for proc in (standby, api):
        assert proc.stop(signal.SIGTERM) == 0, proc.log()[-3000:]


def test_without_a_notify_socket_nothing_is_sent_and_a_bad_one_fails_nothing(
        processes: Processes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert not sdnotify.ready("nobody asked")
    worker = processes.start("worker", "worker", env={"NOTIFY_SOCKET": str(tmp_path / "nobody-listens"),
                                                      "WALFEED_WORKER_METRICS_PORT": "0"})
    eventually(lambda: "systemd notification failed" in worker.log(), timeout=60, what="the failed notification")
    assert worker.running()
    assert worker.stop(signal.SIGTERM) == 0
