"""Start the real `walfeed` processes as subprocesses; stop them with signals."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

# Ports handed to servers a test starts come from below Linux's ephemeral range (32768-60999 by default), from
# which the kernel picks the local port of every outgoing connection: a port taken from that range by binding port 0
# is free when returned, but a client's connection may take it before the server binds it, seconds later (a
# RabbitMQ node of testkit/rabbit_cluster.py failed to start on `eaddrinuse` that way). Never the same port twice in
# one test process.
PORTS = range(20_000, 32_000)
_issued: set[int] = set()


def free_port() -> int:
    """A port no one listens on now, outside the ephemeral range, not handed out before by this process."""
    for _ in range(1_000):
        port = random.choice(PORTS)
        if port in _issued:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _issued.add(port)
        return port
    raise RuntimeError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


WALFEED: tuple[str, ...] = (sys.executable, "-m", "services.cli")  # the `walfeed` command line


class Process:
    """One subprocess, `walfeed <args>` unless `command` names another program, its output in `<log_dir>/<name>.log`.

    `own_session` starts it in a session of its own, so that a Ctrl-C in the terminal reaches only the parent, which
    then stops it in order (the benchmarks); the tests' processes share the test run's session."""

    def __init__(self, name: str, args: list[str], env: Mapping[str, str], log_dir: Path,
                 command: Sequence[str] = WALFEED, own_session: bool = False) -> None:
        self.name = name
        self.args = args
        self.log_path = log_dir / f"{name}.log"
        self._command = list(command)
        self._env = dict(env)
        self._own_session = own_session
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        assert self._popen is None or self._popen.poll() is not None, f"{self.name} is running"
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child from here on
        log.write(f"--- start {' '.join(self.args)}\n".encode())
        log.flush()
        self._popen = subprocess.Popen(
            [*self._command, *self.args], env=self._env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=self._own_session,
        )
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self._popen is not None
        return self._popen.pid

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def returncode(self) -> int | None:
        return None if self._popen is None else self._popen.poll()

    def send(self, sig: int) -> None:
        if self.running():
            assert self._popen is not None
            self._popen.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL: the crash a test injects. Only this process: children it started are orphaned, as in a crash."""
        if self.running():
            assert self._popen is not None
            self._popen.kill()
            self._popen.wait(10)

    def kill_tree(self) -> None:
        """SIGKILL this process and all its descendants (teardown: leave nothing running)."""
        if self._popen is None:
            return
        pids, frontier = [], [self._popen.pid]
        while frontier:
            pid = frontier.pop()
            pids.append(pid)
            frontier.extend(children_of(pid))
        for pid in reversed(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(10)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Graceful stop; returns the exit code. SIGKILLs (and fails the wait) if it does not exit in time."""
        assert self._popen is not None
        self.send(sig)
        return self.wait(timeout)

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for the process to exit by itself; returns the exit code."""
        assert self._popen is not None
        try:
            return self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.wait(10)
            raise AssertionError(f"{self.name} did not exit within {timeout}s") from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class Processes:
    """Every process a test starts; the fixture kills the survivors at teardown."""

    def __init__(self, env: Mapping[str, str], log_dir: Path) -> None:
        self.env = {**os.environ, **env}
        self.log_dir = log_dir
        self.all: list[Process] = []

    def start(self, name: str, *args: str, env: Mapping[str, str] | None = None) -> Process:
        proc = Process(name, list(args), {**self.env, **(env or {})}, self.log_dir)
        self.all.append(proc)
        return proc.start()

    def kill_all(self) -> None:
        for proc in self.all:
            with contextlib.suppress(Exception):
                proc.kill_tree()

    def logs(self) -> str:
        return "\n".join(f"===== {p.name} ({p.log_path})\n{p.log()[-6000:]}" for p in self.all)


def children_of(pid: int) -> list[int]:
    """Direct children of a process (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
