"""Rate-limit policy, decided without I/O (ADR 0033): fixed windows counted in Postgres, one UPSERT per request.

The database returns the window's hit count (this request included), the window's start and its own clock;
everything else is decided here: allowed or not, what remains, when the window resets, the client's partition
key, and the header fields of draft-ietf-httpapi-ratelimit-headers (`RateLimit-Policy`, `RateLimit`).
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass
from typing import Final

IPV6_PREFIX: Final = 64  # one IPv6 subscriber usually holds a whole /64: count it as one client


@dataclass(frozen=True, slots=True)
class Quota:
    """`limit` requests per `window` seconds for each partition (client address or user); limit 0: no limit."""

    policy: str
    limit: int
    window: int

    @property
    def enabled(self) -> bool:
        return self.limit > 0

    @property
    def header(self) -> str:
        """The RateLimit-Policy field value (a structured-field list item)."""
        return f'"{self.policy}";q={self.limit};w={self.window}'

    def key(self, subject: str) -> str:
        return f"{self.policy}:{subject}"


@dataclass(frozen=True, slots=True)
class Decision:
    quota: Quota
    allowed: bool
    remaining: int
    reset: int  # whole seconds until the window ends (at least 1)

    @property
    def headers(self) -> dict[str, str]:
        """RateLimit-Policy and RateLimit. A refusal also sends Retry-After = `reset`: the draft wants it no
        earlier than t."""
        return {"RateLimit-Policy": self.quota.header,
                "RateLimit": f'"{self.quota.policy}";r={self.remaining};t={self.reset}'}


def decide(quota: Quota, hits: int, window_start: int, now: float) -> Decision:
    """`hits`: requests counted in the window that started at `window_start` (epoch seconds), this one included."""
    reset = max(1, math.ceil(window_start + quota.window - now))
    return Decision(quota, allowed=hits <= quota.limit, remaining=max(0, quota.limit - hits), reset=reset)


def client_subject(host: str | None) -> str:
    """The partition of a client address: IPv4 as is, IPv6 by its /64 (an attacker gets a /64 for free, not a
    /48 of distinct limits). Unparseable or absent addresses share one partition."""
    if not host:
        return "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "unknown"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, IPV6_PREFIX), strict=False))
    return str(address)
