"""The relay's, the worker's and the delivery worker's /metrics are unauthenticated: by default they listen on the
loopback interface only, and WALFEED_{RELAY,WORKER,DELIVERY}_METRICS_HOST moves them (docs/adr/0060)."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

import pytest

from testkit.processes import Processes, free_port
from testkit.waiting import eventually

pytestmark = pytest.mark.integration

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp{,6}


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a listening TCP socket on `port` (Linux /proc/net/tcp and tcp6)."""
    found = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        path = Path("/proc/net") / table
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            address, hexport = fields[1].split(":")
            if fields[3] != _LISTEN or int(hexport, 16) != port:
                continue
            raw = bytes.fromhex(address)
            # The kernel prints each 32-bit word in host (little-endian) order.
            packed = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found.add(str(ipaddress.ip_address(socket.inet_ntop(family, packed))))
    return found


@pytest.mark.parametrize("process", ["relay", "worker", "delivery"])
@pytest.mark.parametrize(("host", "expected"), [(None, {"127.0.0.1"}), ("0.0.0.0", {"0.0.0.0"})])
def test_metrics_listen_on_loopback_unless_told_otherwise(
        processes: Processes, process: str, host: str | None, expected: set[str]) -> None:
    port = free_port()
    prefix = f"WALFEED_{process.upper()}_METRICS"
    env = {f"{prefix}_PORT": str(port)}
    if host is not None:
        env[f"{prefix}_HOST"] = host
    args = ["deliver", "--channel", "webhook"] if process == "delivery" else [process]
    proc = processes.start(process, *args, env=env)
    assert eventually(lambda: listening_addresses(port), timeout=30, what=f"{process} metrics listening",
                      ) == expected, proc.log()
