"""Settings of `walfeed deliver --channel webhook|email`, read once at start (docs/settings.md, "Delivery").

| variable | default | meaning |
|---|---|---|
| `WALFEED_DELIVERY_CONCURRENCY` | `16` | sends in flight in this process (threads), as many again admitted ahead |
| `WALFEED_DELIVERY_MAX_ATTEMPTS` | `12` | tries before a delivery is DEAD (12: about 4 h with the defaults) |
| `WALFEED_DELIVERY_RETRY_BASE` | `30` | seconds before the second try; each next doubles |
| `WALFEED_DELIVERY_RETRY_CAP` | `1800` | seconds: the longest backoff |
| `WALFEED_DELIVERY_RETRY_AFTER_MAX` | `86400` | seconds: the longest `Retry-After` honoured |
| `WALFEED_DELIVERY_RATE` | `10` | tries per second per target (webhook, or recipient's mailbox); `0`: no limit |
| `WALFEED_DELIVERY_BURST` | `20` | tries a target may get at once above its rate |
| `WALFEED_DELIVERY_HOST_LIMIT` | `3000` | tries per destination host per window, all processes together; `0`: none |
| `WALFEED_DELIVERY_HOST_WINDOW` | `60` | seconds: the host budget's fixed window (of the database clock) |
| `WALFEED_DELIVERY_DISABLE_AFTER` | `432000` | seconds (5 days) a webhook may fail, no success, before it is disabled |
| `WALFEED_DELIVERY_CONNECT_TIMEOUT` | `5` | seconds to connect to a receiver |
| `WALFEED_DELIVERY_TIMEOUT` | `15` | seconds for a whole try: resolving, connecting, the request, its answer |
| `WALFEED_DELIVERY_DEAD_MAX_LENGTH` | `100000` | dead letters kept per channel |
| `WALFEED_DELIVERY_METRICS_PORT` | `9103` webhook, `9104` email | Prometheus endpoint; `0` turns it off |
| `WALFEED_DELIVERY_METRICS_HOST` | `127.0.0.1` | address the metrics endpoint binds (unauthenticated) |
| `WALFEED_WEBHOOK_ALLOWED_NETWORKS` | empty | CIDR networks webhooks may reach although not public (ssrf.py) |
| `WALFEED_WEBHOOK_ALLOW_HTTP` | `false` | allow plain `http://` webhook URLs |
| `WALFEED_SMTP_URL` | none | `smtp://[user:password@]host[:port]`, `smtp+starttls://`, `smtps://`: needed for email |
| `WALFEED_SMTP_FROM` | `walfeed <notifications@localhost>` | the From of notification mail |
| `WALFEED_API_PUBLIC_URL` | none | the api's https base URL for mail readers (unsubscribe links); needed for email |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parseaddr
from typing import Final
from urllib.parse import unquote, urlsplit

from services.core import ssrf
from services.core.settings import METRICS_HOST, Env, SettingsError
from services.delivery import budget, policy

DEAD_MAX_LENGTH: Final = 100_000
METRICS_PORTS: Final = {"webhook": 9103, "email": 9104}  # one of each channel on a host without a setting


@dataclass(frozen=True, slots=True)
class Smtp:
    host: str
    port: int
    tls: str  # "none", "starttls" or "implicit"
    username: str | None
    password: str | None = None

    def __repr__(self) -> str:  # never the password, in a log or a traceback
        return f"Smtp(host={self.host!r}, port={self.port}, tls={self.tls!r}, username={self.username!r})"


@dataclass(frozen=True, slots=True)
class Email:
    smtp: Smtp
    sender: str
    api_url: str  # WALFEED_API_PUBLIC_URL without a trailing slash: where List-Unsubscribe POSTs go


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    channel: str
    concurrency: int
    retry: policy.Settings
    rate: float
    burst: int
    hosts: budget.HostBudget
    connect_timeout: float
    timeout: float
    dead_max_length: int
    ssrf: ssrf.Policy
    email: Email | None
    metrics_port: int
    metrics_host: str

    @classmethod
    def from_env(cls, channel: str, environ: Mapping[str, str] | None = None) -> DeliverySettings:
        env = Env(environ)
        base = env.float("WALFEED_DELIVERY_RETRY_BASE", 30.0, minimum=0.01, maximum=86_400.0)
        cap = env.float("WALFEED_DELIVERY_RETRY_CAP", 1800.0, minimum=0.01, maximum=86_400.0)
        if cap < base:
            raise SettingsError(f"WALFEED_DELIVERY_RETRY_CAP={cap} is below WALFEED_DELIVERY_RETRY_BASE={base}")
        connect = env.float("WALFEED_DELIVERY_CONNECT_TIMEOUT", 5.0, minimum=0.01, maximum=600.0)
        total = env.float("WALFEED_DELIVERY_TIMEOUT", 15.0, minimum=0.01, maximum=600.0)
        if total < connect:
            raise SettingsError(f"WALFEED_DELIVERY_TIMEOUT={total} is below WALFEED_DELIVERY_CONNECT_TIMEOUT={connect}")
        return cls(
            channel=channel,
            concurrency=env.int("WALFEED_DELIVERY_CONCURRENCY", 16, minimum=1, maximum=256),
            retry=policy.Settings(
                max_attempts=env.int("WALFEED_DELIVERY_MAX_ATTEMPTS", 12, minimum=1, maximum=100),
                base=base, cap=cap,
                retry_after_max=env.float("WALFEED_DELIVERY_RETRY_AFTER_MAX", 86_400.0, minimum=0.0,
                                          maximum=86_400.0),
                disable_after=env.float("WALFEED_DELIVERY_DISABLE_AFTER", 432_000.0, minimum=1.0)),
            rate=env.float("WALFEED_DELIVERY_RATE", 10.0, minimum=0.0, maximum=100_000.0),
            burst=env.int("WALFEED_DELIVERY_BURST", 20, minimum=1, maximum=100_000),
            hosts=budget.HostBudget(env.int("WALFEED_DELIVERY_HOST_LIMIT", 3000, minimum=0, maximum=100_000_000),
                                    env.float("WALFEED_DELIVERY_HOST_WINDOW", 60.0, minimum=1.0, maximum=86_400.0)),
            connect_timeout=connect,
            timeout=total,
            dead_max_length=env.int("WALFEED_DELIVERY_DEAD_MAX_LENGTH", DEAD_MAX_LENGTH, minimum=1,
                                    maximum=100_000_000),
            ssrf=ssrf.policy_from_env(env),
            email=_email(env) if channel == "email" else None,
            metrics_port=env.int("WALFEED_DELIVERY_METRICS_PORT", METRICS_PORTS.get(channel, 0), minimum=0,
                                 maximum=65_535),
            metrics_host=env.str("WALFEED_DELIVERY_METRICS_HOST", "127.0.0.1", METRICS_HOST),
        )


def _email(env: Env) -> Email:
    url = env.optional("WALFEED_SMTP_URL")
    if url is None:
        raise SettingsError("WALFEED_SMTP_URL is not set: `walfeed deliver --channel email` needs an SMTP server, "
                            "e.g. smtp+starttls://user:password@mail.example.com:587")
    smtp = parse_smtp_url(url)
    sender = env.str("WALFEED_SMTP_FROM", "walfeed <notifications@localhost>")
    address = parseaddr(sender)[1]
    if "@" not in address:
        raise SettingsError(f"WALFEED_SMTP_FROM={sender!r} is invalid: expected an address such as "
                            "'walfeed <notifications@example.com>'")
    return Email(smtp, sender, _api_url(env))


_LOOPBACK: Final = ("127.0.0.1", "localhost", "[::1]")


def _api_url(env: Env) -> str:
    """WALFEED_API_PUBLIC_URL: https (RFC 8058's one-click unsubscribe needs it); plain http on loopback only."""
    url = env.optional("WALFEED_API_PUBLIC_URL")
    if url is None:
        raise SettingsError("WALFEED_API_PUBLIC_URL is not set: `walfeed deliver --channel email` puts a one-click "
                            "unsubscribe link to the api in every mail, e.g. https://walfeed.example.com")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        parts = None
    loopback = parts is not None and parts.scheme == "http" and parts.netloc.rsplit(":", 1)[0] in _LOOPBACK
    if parts is None or not parts.hostname or parts.query or parts.fragment or parts.username \
            or not (parts.scheme == "https" or loopback):
        raise SettingsError(f"WALFEED_API_PUBLIC_URL={url!r} is invalid: expected the api's base URL, "
                            "https://host[:port][/path] (http:// only on 127.0.0.1 or localhost)")
    return url.rstrip("/")


_SMTP_SCHEMES: Final = {"smtp": ("none", 25), "smtp+starttls": ("starttls", 587), "smtps": ("implicit", 465)}


def parse_smtp_url(url: str) -> Smtp:
    """WALFEED_SMTP_URL; errors name the variable but never repeat the URL (it may hold a password)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise SettingsError("WALFEED_SMTP_URL is invalid: expected smtp://host:port") from None
    if parts.scheme not in _SMTP_SCHEMES or not parts.hostname:
        raise SettingsError("WALFEED_SMTP_URL is invalid: expected smtp://, smtp+starttls:// or smtps:// and a host")
    tls, default_port = _SMTP_SCHEMES[parts.scheme]
    return Smtp(parts.hostname, port or default_port, tls,
                unquote(parts.username) if parts.username else None,
                unquote(parts.password) if parts.password else None)
