"""Closed-loop load: each connection sends its next request when the previous answer arrived, as fast as the
server answers. Two clients: raw HTTP/1.1 keep-alive connections on one event loop (a minimal wrk; httpx would
spend more CPU than the server on this 2-core machine), and pgbench running a script on the database."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import cast


class _KeepAlive(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection sending the same prepared request until the deadline: a minimal
    wrk-like client (httpx would spend more CPU than the server on this 2-core machine). Counts responses and
    requires the expected status line."""

    def __init__(self, request: bytes, expect: bytes, deadline: float, done: asyncio.Future[int]) -> None:
        self.request, self.expect, self.deadline, self.done = request, expect, deadline, done
        self.buffer, self.count = b"", 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a TCP transport (uvloop's is no subclass)
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buffer += data
        while (head_end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:head_end]
            at = head.lower().find(b"content-length:")
            length = int(head[at + 15:head.find(b"\r\n", at) if head.find(b"\r\n", at) > 0 else None]) if at >= 0 else 0
            if len(self.buffer) < head_end + 4 + length:
                return
            if not head.startswith(self.expect):
                self.transport.close()
                if not self.done.done():
                    self.done.set_exception(AssertionError(head[:200]))
                return
            self.buffer = self.buffer[head_end + 4 + length:]
            self.count += 1
            if time.perf_counter() < self.deadline:
                self.transport.write(self.request)
            else:
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(self.count)


async def _load(port: int, requests: list[bytes], expect: bytes, clients: int, seconds: float) -> float:
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    futures = []
    for k in range(clients):
        done: asyncio.Future[int] = loop.create_future()
        await loop.create_connection(lambda k=k, done=done: _KeepAlive(requests[k % len(requests)], expect,  # type: ignore[misc]
                                                                      started + seconds, done), "127.0.0.1", port)
        futures.append(done)
    counts = await asyncio.gather(*futures)
    return sum(counts) / (time.perf_counter() - started)


def load(port: int, requests: list[bytes], expect: bytes, clients: int, seconds: float) -> float:
    """Requests per second over `clients` keep-alive connections (uvloop when installed: cheaper still)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(_load(port, requests, expect, clients, seconds))
    return uvloop.run(_load(port, requests, expect, clients, seconds))


def profiled_load(port: int, pid: int, requests: list[bytes], expect: bytes, clients: int, seconds: float,
                  output: str) -> None:
    """`load` while py-spy samples the server `pid` and its subprocesses, collapsed stacks written to `output`
    (profiling slows the server: the rate of this run is not a result)."""
    spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid),
                            "--subprocesses", "--rate", "250", "--format", "raw", "--output", output,
                            "--duration", str(int(seconds) + 1)], stdout=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attaches
    load(port, requests, expect, clients, seconds)
    spy.wait(60)
    print(f"profile: {output}")


def pgbench_tps(url: str, script: str | Sequence[str], clients: int, seconds: float, options: str = "") -> float:
    """Transactions per second of pgbench running `script` (prepared statements) over `clients` connections; several
    scripts: each transaction runs one of them, picked at random; `options`: the sessions' settings as libpq's
    `options` (PGOPTIONS), e.g. the api's plan_cache_mode."""
    binary = "/usr/lib/postgresql/15/bin/pgbench"
    if not os.path.exists(binary):
        binary = "pgbench"
    files = []
    for text in [script] if isinstance(script, str) else script:
        with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as file:
            file.write(text)
        files.append(file.name)
    try:
        out = subprocess.run([binary, "-n", "-M", "prepared", "-c", str(clients), "-j", "1", "-T", str(int(seconds)),
                              *(arg for name in files for arg in ("-f", name)), url], capture_output=True, text=True,
                             check=True, env={**os.environ, "PGOPTIONS": options}).stdout
    finally:
        for name in files:
            os.unlink(name)
    match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    assert match, out
    return float(match.group(1))
