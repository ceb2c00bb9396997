"""systemd's readiness protocol (sd_notify(3)), without libsystemd: a datagram to $NOTIFY_SOCKET. The units in
deploy/systemd are `Type=notify`: systemd counts a process started when it says READY=1, after it does its job
(the api serves HTTP, the relay streams or stands by, the worker consumes). Without $NOTIFY_SOCKET (not under
systemd) nothing is sent. Best effort: a failed notification is logged, never raised."""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


def notify(*fields: str) -> bool:
    """Send `fields` ("READY=1", "STATUS=...") to systemd; True if sent."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address or not fields:
        return False
    if address.startswith("@"):  # an abstract socket
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto("\n".join(fields).encode(), address)
        return True
    except OSError as exc:
        log.warning("systemd notification failed", extra={"socket": address, "error": repr(exc)})
        return False


def ready(status: str) -> bool:
    return notify("READY=1", f"STATUS={status}")


def stopping(status: str) -> bool:
    return notify("STOPPING=1", f"STATUS={status}")
