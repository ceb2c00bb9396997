"""The per-host budget of tries (ADR 0100): which host a delivery goes to, and which of a batch's tries to
one host fit in what is left of its window. Pure; the counting is sql.HOST_BUDGET's, shared by every process.

One post can mention 10 users with up to 10 webhooks and an email each; many users can point webhooks at one host.
The per-target rate (sql.LOAD) bounds each webhook, not what all of them together send to one host: this does.
A try over its host's budget waits for the next window (a retry hop, no attempt spent); it is never dropped.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from services.core import ssrf
from services.delivery.payload import Delivery

# Tries over budget wait for the window's end plus up to this fraction of a window more, at random: those held
# back together do not all come back at the same instant.
SPREAD: Final = 0.2


@dataclass(frozen=True, slots=True)
class HostBudget:
    limit: int  # tries per window per host; 0: no budget
    window: float  # seconds


NO_BUDGET: Final = HostBudget(0, 60.0)


@dataclass(frozen=True, slots=True)
class Taken:
    """A host's count after a batch asked for its tries: `hits` in the window so far (this batch's included) and
    `left` seconds until the window ends."""

    hits: int
    left: float


def host_of(delivery: Delivery) -> str | None:
    """The destination host: a webhook URL's host, a mail address's domain, one spelling of each (ssrf.host_key: an
    IPv4-mapped address and its IPv4 one, a name and its ASCII form are one host); None if it has none (the try
    refuses it anyway)."""
    if delivery.channel == "email":
        domain = (delivery.email or "").rpartition("@")[2].strip()
        return ssrf.host_key(domain) or None
    try:
        host = urlsplit(delivery.url or "").hostname
    except ValueError:
        return None
    return (ssrf.host_key(host) or None) if host else None


def count(hosts: Sequence[str | None]) -> dict[str, int]:
    """Tries asked for per host."""
    asked: dict[str, int] = {}
    for host in hosts:
        if host is not None:
            asked[host] = asked.get(host, 0) + 1
    return asked


def allowed(asked: int, taken: Taken, limit: int) -> int:
    """How many of the `asked` tries of a batch fit: those the window had room for before this batch."""
    before = taken.hits - asked
    return max(0, min(asked, limit - before))


def delays(hosts: Sequence[str | None], taken: Mapping[str, Taken], limit: int, window: float,
           rand: random.Random) -> list[float | None]:
    """For each try of a batch (its host, in order): None if it may go now, else seconds to wait. The first ones of
    a host, in the batch's order, take the room left."""
    asked = count(hosts)
    room = {host: allowed(n, taken[host], limit) for host, n in asked.items() if host in taken}
    out: list[float | None] = []
    for host in hosts:
        if host is None or host not in room:
            out.append(None)
        elif room[host] > 0:
            room[host] -= 1
            out.append(None)
        else:
            out.append(taken[host].left + SPREAD * window * rand.random())
    return out
