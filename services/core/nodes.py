"""The broker nodes of `WALFEED_AMQP_URL` (docs/amqp.md, "A cluster"). Pure.

One amqp URL per node, comma-separated: `amqp://u:p@node1:5672/%2F,amqp://u:p@node2:5672/%2F`. Each is a whole
URL, so each node may have its own port, TLS or query options; all name the same virtual host (one cluster, one
vhost). A comma never occurs in an amqp URL otherwise (RFC 3986 reserves it; a password holding one is written
%2C). Processes connect to the first node that answers, in the order given, and after a lost connection start
again from the first.
"""

from __future__ import annotations

import urllib.parse

from services.core.redact import redact

SETTING = "WALFEED_AMQP_URL"


def split(value: str) -> tuple[str, ...]:
    """The node URLs of a `WALFEED_AMQP_URL` value, validated; raises ValueError naming the setting
    (services/core/settings.py turns it into a SettingsError)."""
    urls = tuple(part.strip() for part in value.split(","))
    if not value.strip() or any(not url for url in urls):
        raise ValueError(f"{SETTING}={redact(value)!r} is invalid: expected one amqp:// URL per broker node, "
                            "separated by commas, none empty")
    vhosts = set()
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("amqp", "amqps") or not parts.hostname:
            raise ValueError(f"{SETTING}: {redact(url)!r} is invalid: expected amqp://user:password@host:port/vhost "
                                "or amqps://...")
        try:
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError:
            raise ValueError(f"{SETTING}: {redact(url)!r} has an invalid port") from None
        vhosts.add(vhost(url))
    if len(vhosts) > 1:
        raise ValueError(f"{SETTING}={redact(value)!r} is invalid: every node must name the same virtual host, "
                            f"found {sorted(vhosts)}")
    if len(set(urls)) != len(urls):
        raise ValueError(f"{SETTING}={redact(value)!r} is invalid: a node is listed twice")
    return urls


def vhost(url: str) -> str:
    """The virtual host an amqp URL names ('/' when it names none)."""
    path = urllib.parse.urlsplit(url).path
    return urllib.parse.unquote(path[1:]) if len(path) > 1 else "/"
