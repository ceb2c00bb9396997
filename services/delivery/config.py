"""Settings of `walfeed deliver --channel webhook|email`, read once at start (docs/settings.md, "delivery").

Each setting is declared once below (services/core/settings.py): its variable, default, bounds and meaning.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parseaddr
from typing import Final
from urllib.parse import unquote, urlsplit

from services.core import ssrf
from services.core.settings import BIND_ADDRESS, Declared, Env, Float, Int, OptionalStr, SettingsError, Str
from services.delivery import budget, policy

METRICS_PORTS: Final = {"webhook": 9103, "email": 9104}  # one of each channel on a host without a setting

CONCURRENCY: Final = Int(
    "WALFEED_DELIVERY_CONCURRENCY", 16,
    "sends in flight in this process (threads), as many again admitted ahead (ADR 0082); run more processes for more",
    minimum=1, maximum=256)
MAX_ATTEMPTS: Final = Int("WALFEED_DELIVERY_MAX_ATTEMPTS", 12,
                          "tries before a delivery is `DEAD` (12: about 4 h with the defaults)", minimum=1, maximum=100)
RETRY_BASE: Final = Float(
    "WALFEED_DELIVERY_RETRY_BASE", 30.0,
    "seconds before the second try; each next waits twice as long, less up to a fifth (jitter)",
    minimum=0.01, maximum=86_400.0)
RETRY_CAP: Final = Float("WALFEED_DELIVERY_RETRY_CAP", 1800.0, "seconds: the longest backoff (not below the base)",
                         minimum=0.01, maximum=86_400.0)
RETRY_AFTER_MAX: Final = Float(
    "WALFEED_DELIVERY_RETRY_AFTER_MAX", 86_400.0,
    "seconds: the longest `Retry-After` honoured (a longer one waits this long)", minimum=0.0, maximum=86_400.0)
RATE: Final = Float(
    "WALFEED_DELIVERY_RATE", 10.0,
    "tries per second per target (a webhook, or a recipient's mailbox), shared by all processes; `0`: no limit",
    minimum=0.0, maximum=100_000.0)
BURST: Final = Int("WALFEED_DELIVERY_BURST", 20, "tries a target may get at once before its rate applies",
                   minimum=1, maximum=100_000)
HOST_LIMIT: Final = Int(
    "WALFEED_DELIVERY_HOST_LIMIT", 3000,
    "tries per destination host (a webhook URL's host, a mail address's domain) per window, all delivery processes "
    "together (Postgres); a try over it waits for the next window, no attempt spent (ADR 0100); `0`: no limit",
    minimum=0, maximum=100_000_000)
HOST_WINDOW: Final = Float("WALFEED_DELIVERY_HOST_WINDOW", 60.0,
                           "seconds: the host budget's fixed window, of the database clock", minimum=1.0,
                           maximum=86_400.0)
DISABLE_AFTER: Final = Float("WALFEED_DELIVERY_DISABLE_AFTER", 432_000.0,
                             "seconds (5 days) a webhook may fail without a success before it is disabled",
                             minimum=1.0, maximum=31_536_000.0)
CONNECT_TIMEOUT: Final = Float("WALFEED_DELIVERY_CONNECT_TIMEOUT", 5.0,
                               "seconds to connect to a receiver or an SMTP server", minimum=0.01, maximum=600.0)
TIMEOUT: Final = Float(
    "WALFEED_DELIVERY_TIMEOUT", 15.0,
    "seconds for a whole try: resolving the name, connecting (at most 4 addresses), sending, the answer and its "
    "body; a receiver dripping its answer is cut off there (not below the connect timeout)",
    minimum=0.01, maximum=600.0)
DEAD_MAX_LENGTH: Final = Int(
    "WALFEED_DELIVERY_DEAD_MAX_LENGTH", 100_000,
    "dead letters kept per channel; a full dead queue refuses more (they wait in a retry queue)",
    minimum=1, maximum=100_000_000)
METRICS_PORT: Final = Int(
    "WALFEED_DELIVERY_METRICS_PORT", None,
    "Prometheus endpoint (`walfeed_delivery_*`: tries by status, try time, throttled tries, disabled webhooks, dead "
    "letters); `0` turns it off", minimum=0, maximum=65_535,
    shown=", ".join(f"`{port}` ({channel})" for channel, port in METRICS_PORTS.items()))
METRICS_HOST: Final = Str("WALFEED_DELIVERY_METRICS_HOST", "127.0.0.1",
                          "address the metrics endpoint binds (unauthenticated: keep it internal)", BIND_ADDRESS,
                          allowed="an address or host name")
SMTP_URL: Final = OptionalStr(
    "WALFEED_SMTP_URL", "the mail server; required by `--channel email`",
    allowed="`smtp://[user:password@]host[:port]` (25), `smtp+starttls://...` (587), `smtps://...` (465)",
    shown="none")
SMTP_FROM: Final = Str("WALFEED_SMTP_FROM", "walfeed <notifications@localhost>", "the From of notification mail",
                       allowed="an address, e.g. `walfeed <notifications@example.com>`")
API_PUBLIC_URL: Final = OptionalStr(
    "WALFEED_API_PUBLIC_URL",
    "the api's base URL as mail readers reach it; required by `--channel email`: every notification mail's one-click "
    "unsubscribe (RFC 8058) POSTs to `{url}/v1/unsubscribe?token=...`",
    allowed="`https://host[:port][/path]` (plain `http://` only on 127.0.0.1 or localhost)", shown="none")
SETTINGS: Final[tuple[Declared, ...]] = (
    CONCURRENCY, MAX_ATTEMPTS, RETRY_BASE, RETRY_CAP, RETRY_AFTER_MAX, RATE, BURST, HOST_LIMIT, HOST_WINDOW,
    DISABLE_AFTER, CONNECT_TIMEOUT, TIMEOUT, DEAD_MAX_LENGTH, METRICS_PORT, METRICS_HOST, *ssrf.SETTINGS, SMTP_URL,
    SMTP_FROM, API_PUBLIC_URL)


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
        base, cap = RETRY_BASE.read(env), RETRY_CAP.read(env)
        if cap < base:
            raise SettingsError(f"{RETRY_CAP.name}={cap} is below {RETRY_BASE.name}={base}")
        connect, total = CONNECT_TIMEOUT.read(env), TIMEOUT.read(env)
        if total < connect:
            raise SettingsError(f"{TIMEOUT.name}={total} is below {CONNECT_TIMEOUT.name}={connect}")
        return cls(
            channel=channel,
            concurrency=CONCURRENCY.read(env),
            retry=policy.Settings(max_attempts=MAX_ATTEMPTS.read(env), base=base, cap=cap,
                                  retry_after_max=RETRY_AFTER_MAX.read(env), disable_after=DISABLE_AFTER.read(env)),
            rate=RATE.read(env),
            burst=BURST.read(env),
            hosts=budget.HostBudget(HOST_LIMIT.read(env), HOST_WINDOW.read(env)),
            connect_timeout=connect,
            timeout=total,
            dead_max_length=DEAD_MAX_LENGTH.read(env),
            ssrf=ssrf.policy_from_env(env),
            email=_email(env) if channel == "email" else None,
            metrics_port=METRICS_PORT.read(env, default=METRICS_PORTS.get(channel, 0)),
            metrics_host=METRICS_HOST.read(env),
        )


def _email(env: Env) -> Email:
    url = SMTP_URL.read(env)
    if url is None:
        raise SettingsError(f"{SMTP_URL.name} is not set: `walfeed deliver --channel email` needs an SMTP server, "
                            "e.g. smtp+starttls://user:password@mail.example.com:587")
    smtp = parse_smtp_url(url)
    sender = SMTP_FROM.read(env)
    address = parseaddr(sender)[1]
    if "@" not in address:
        raise SettingsError(f"{SMTP_FROM.name}={sender!r} is invalid: expected an address such as "
                            "'walfeed <notifications@example.com>'")
    return Email(smtp, sender, _api_url(env))


_LOOPBACK: Final = ("127.0.0.1", "localhost", "[::1]")


def _api_url(env: Env) -> str:
    """WALFEED_API_PUBLIC_URL: https (RFC 8058's one-click unsubscribe needs it); plain http on loopback only."""
    url = API_PUBLIC_URL.read(env)
    if url is None:
        raise SettingsError(f"{API_PUBLIC_URL.name} is not set: `walfeed deliver --channel email` puts a one-click "
                            "unsubscribe link to the api in every mail, e.g. https://walfeed.example.com")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        parts = None
    loopback = parts is not None and parts.scheme == "http" and parts.netloc.rsplit(":", 1)[0] in _LOOPBACK
    if parts is None or not parts.hostname or parts.query or parts.fragment or parts.username \
            or not (parts.scheme == "https" or loopback):
        raise SettingsError(f"{API_PUBLIC_URL.name}={url!r} is invalid: expected the api's base URL, "
                            "https://host[:port][/path] (http:// only on 127.0.0.1 or localhost)")
    return url.rstrip("/")


_SMTP_SCHEMES: Final = {"smtp": ("none", 25), "smtp+starttls": ("starttls", 587), "smtps": ("implicit", 465)}


def parse_smtp_url(url: str) -> Smtp:
    """WALFEED_SMTP_URL; errors name the variable but never repeat the URL (it may hold a password)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise SettingsError(f"{SMTP_URL.name} is invalid: expected smtp://host:port") from None
    if parts.scheme not in _SMTP_SCHEMES or not parts.hostname:
        raise SettingsError(f"{SMTP_URL.name} is invalid: expected smtp://, smtp+starttls:// or smtps:// and a host")
    tls, default_port = _SMTP_SCHEMES[parts.scheme]
    return Smtp(parts.hostname, port or default_port, tls,
                unquote(parts.username) if parts.username else None,
                unquote(parts.password) if parts.password else None)
