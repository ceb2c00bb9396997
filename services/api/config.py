"""Settings of the api process, read once at start from `WALFEED_API_*` variables (docs/settings.md, "api").

Each setting is declared once below (services/core/settings.py): its variable, default, bounds and meaning.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from services.api import search_config
from services.api.ratelimit import Quota
from services.core import ssrf
from services.core.settings import (
    LIBPQ,
    Choice,
    Declared,
    Env,
    Flag,
    Float,
    Int,
    OptionalStr,
    SettingsError,
    Str,
    libpq_url,
)


def default_workers() -> int:
    """One server process per CPU this process may use (its affinity, not the machine's count), at most 64: the api
    is CPU-bound per request, and one process runs on one core (ADR 0111)."""
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    return max(1, min(64, len(usable)))


HOST: Final = Str("WALFEED_API_HOST", "127.0.0.1", "address to listen on (`--host`); keep it local behind a TLS proxy",
                  allowed="an address or host name")
PORT: Final = Int("WALFEED_API_PORT", 8000, "port (`--port`)", minimum=1, maximum=65_535)
WORKERS: Final = Int(
    "WALFEED_API_WORKERS", default_workers,
    "server worker processes (`--workers`), each with its own pool: by default as many as the CPUs the process may "
    "use (its affinity), at most 64; /metrics aggregates all (ADR 0111)", minimum=1, maximum=64, shown="one per CPU")
SERVER: Final = Choice(
    "WALFEED_API_SERVER", "granian", ("granian", "uvicorn"),
    "the ASGI server: `granian` (a supervisor and `WALFEED_API_WORKERS` processes), or `uvicorn` (uvloop and "
    "httptools; one worker is served in the process itself); both stop gracefully on SIGTERM and SIGINT, giving the "
    "workers 20 s to finish (ADR 0111)")
MAX_BODY_BYTES: Final = Int("WALFEED_API_MAX_BODY_BYTES", 16_384,
                            "request bodies larger than this are rejected (413) before parsing",
                            minimum=64, maximum=16 * 1024 * 1024)
POOL_MIN: Final = Int("WALFEED_API_POOL_MIN", 2, "database connections kept open", minimum=0, maximum=1000)
POOL_MAX: Final = Int("WALFEED_API_POOL_MAX", 10, "most database connections open at once (not below the min)",
                      minimum=1, maximum=1000)
POOL_TIMEOUT: Final = Float("WALFEED_API_POOL_TIMEOUT", 5.0,
                            "seconds a request waits for a free connection before failing (503)",
                            minimum=0.1, maximum=300.0)
STATEMENT_TIMEOUT: Final = Float(
    "WALFEED_API_STATEMENT_TIMEOUT", 2.0,
    "seconds one database statement may run (`statement_timeout`); then 503 `database-timeout`",
    minimum=0.001, maximum=3600.0)
AUTH_CACHE_SECONDS: Final = Float("WALFEED_API_AUTH_CACHE_SECONDS", 30.0,
                                  "seconds a verified token is remembered per process; 0: off (ADR 0035)",
                                  minimum=0.0, maximum=3600.0)
METRICS_PORT: Final = Int("WALFEED_API_METRICS_PORT", 0,
                          "0: `/metrics` on the public port; N: only on this separate port instead",
                          minimum=0, maximum=65_535)
METRICS_HOST: Final = Str("WALFEED_API_METRICS_HOST", "127.0.0.1", "address of that separate metrics port",
                          allowed="an address or host name")
DOCS: Final = Flag("WALFEED_API_DOCS", True, "`false`: no `/docs`, `/redoc` or `/openapi.json`")
# Defaults: a household or office behind one address signs up a few accounts an hour; a person writes far less
# than 2 a second on average (Twitter allowed 2,400 posts a day). Both stop a script, not a user.
SIGNUP_LIMIT: Final = Int("WALFEED_API_SIGNUP_LIMIT", 20,
                          "sign-ups per client address per window; 0: no limit (ADR 0033)",
                          minimum=0, maximum=1_000_000)
SIGNUP_WINDOW: Final = Int("WALFEED_API_SIGNUP_WINDOW", 3600, "that window, in seconds", minimum=1, maximum=86_400)
WRITE_LIMIT: Final = Int("WALFEED_API_WRITE_LIMIT", 120,
                         "writes per user per window (posts, follows, webhooks, ...); 0: no limit",
                         minimum=0, maximum=1_000_000)
WRITE_WINDOW: Final = Int("WALFEED_API_WRITE_WINDOW", 60, "that window, in seconds", minimum=1, maximum=86_400)
READ_URL: Final = OptionalStr(
    "WALFEED_DATABASE_READ_URL",
    "a streaming replica (hot standby) of `WALFEED_DATABASE_URL`: timeline, post and user reads go there "
    "(docs/operations.md, ADR 0092); unset: every read on the primary", allowed=LIBPQ)
READ_AFTER_WAIT: Final = Float(
    "WALFEED_API_READ_AFTER_WAIT", 0.25,
    "seconds a read waits for the replica to replay the caller's write (`WalFeed-Read-After`, or remembered), then "
    "reads the primary", minimum=0.0, maximum=10.0)
READ_AFTER_MEMORY: Final = Float(
    "WALFEED_API_READ_AFTER_MEMORY", 10.0,
    "seconds each process remembers a user's last write through it, so their reads see it without the header; 0: off",
    minimum=0.0, maximum=3600.0)
REPLICA_RETRY: Final = Float(
    "WALFEED_API_REPLICA_RETRY", 5.0,
    "after the replica failed, seconds its reads go to the primary before one tries it again",
    minimum=0.1, maximum=3600.0)
# A rotated webhook secret keeps signing for a day (Svix: 24 h too): time for a receiver to deploy the new one.
SECRET_OVERLAP: Final = Int("WALFEED_WEBHOOK_SECRET_OVERLAP", 86_400,
                            "seconds the previous secret keeps signing after a rotation", minimum=0,
                            maximum=30 * 86_400)
FORWARDED_ALLOW_IPS: Final = Str(
    "FORWARDED_ALLOW_IPS", "127.0.0.1,::1",
    "which peers may set `X-Forwarded-For` (read as uvicorn reads it; under granian the api reads it the same way)",
    allowed="addresses, comma-separated, or `*`")
# The Mastodon client API (docs/mastodon.md) and its live stream (ADR 0140).
MASTODON_API: Final = Flag("WALFEED_MASTODON_API", True,
                           "`false`: no Mastodon client API and no OAuth routes (docs/mastodon.md)")
STREAMS_MAX: Final = Int(
    "WALFEED_MASTODON_STREAMS_MAX", 1000,
    "live streams (`/api/v1/streaming`) one api process holds open at most; one more is a 503; granian admits that "
    "many held streams per worker on top of its own concurrency (ADR 0140)", minimum=0, maximum=1_000_000)
STREAMS_PER_USER: Final = Int(
    "WALFEED_MASTODON_STREAMS_PER_USER", 10,
    "live streams one user holds open at most on one api process; one more is a 429 (so that one account cannot take "
    "every stream a process holds)", minimum=1, maximum=1_000_000)
STREAM_BUFFER: Final = Int(
    "WALFEED_MASTODON_STREAM_BUFFER", 256,
    "events queued for one stream; a client that falls further behind is disconnected (it reconnects and reads its "
    "timeline)", minimum=1, maximum=100_000)
STREAM_HEARTBEAT: Final = Float("WALFEED_MASTODON_STREAM_HEARTBEAT", 15.0,
                                "seconds between heartbeat comments on an idle stream", minimum=0.05, maximum=3600.0)
SETTINGS: Final[tuple[Declared, ...]] = (
    HOST, PORT, WORKERS, SERVER, MAX_BODY_BYTES, POOL_MIN, POOL_MAX, POOL_TIMEOUT, STATEMENT_TIMEOUT,
    AUTH_CACHE_SECONDS, METRICS_PORT, METRICS_HOST, DOCS, SIGNUP_LIMIT, SIGNUP_WINDOW, WRITE_LIMIT, WRITE_WINDOW,
    READ_URL, READ_AFTER_WAIT, READ_AFTER_MEMORY, REPLICA_RETRY, SECRET_OVERLAP, *ssrf.SETTINGS,
    FORWARDED_ALLOW_IPS, MASTODON_API, STREAMS_MAX, STREAMS_PER_USER, STREAM_BUFFER, STREAM_HEARTBEAT)
# Search's, listed with the api's in docs/settings.md (services/cli/settings_doc.py imports only a config).
SEARCH_SETTINGS: Final = search_config.SETTINGS

DEFAULT_SIGNUPS: Final = Quota("signup", SIGNUP_LIMIT.default_value(), SIGNUP_WINDOW.default_value())
DEFAULT_WRITES: Final = Quota("write", WRITE_LIMIT.default_value(), WRITE_WINDOW.default_value())
PUBLIC_HTTPS: Final = ssrf.Policy()  # the default: https, public addresses only


@dataclass(frozen=True, slots=True)
class ApiSettings:
    max_body_bytes: int = MAX_BODY_BYTES.default_value()
    pool_min: int = POOL_MIN.default_value()
    pool_max: int = POOL_MAX.default_value()
    pool_timeout: float = POOL_TIMEOUT.default_value()
    workers: int = field(default_factory=WORKERS.default_value)
    server: str = SERVER.default
    auth_cache_seconds: float = AUTH_CACHE_SECONDS.default_value()
    metrics_port: int = METRICS_PORT.default_value()
    metrics_host: str = METRICS_HOST.default
    docs: bool = DOCS.default
    statement_timeout: float = STATEMENT_TIMEOUT.default_value()
    signup_limit: Quota = DEFAULT_SIGNUPS
    write_limit: Quota = DEFAULT_WRITES
    webhook_policy: ssrf.Policy = PUBLIC_HTTPS  # which webhook URLs registration accepts (services/core/ssrf.py)
    secret_overlap: int = SECRET_OVERLAP.default_value()
    read_url: str | None = None  # WALFEED_DATABASE_READ_URL: the replica (docs/adr/0092)
    read_after_wait: float = READ_AFTER_WAIT.default_value()
    read_after_memory: float = READ_AFTER_MEMORY.default_value()
    replica_retry: float = REPLICA_RETRY.default_value()
    mastodon_api: bool = MASTODON_API.default
    streams_max: int = STREAMS_MAX.default_value()
    streams_per_user: int = STREAMS_PER_USER.default_value()
    stream_buffer: int = STREAM_BUFFER.default_value()
    stream_heartbeat: float = STREAM_HEARTBEAT.default_value()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ApiSettings:
        env = Env(environ)
        pool_min, pool_max = POOL_MIN.read(env), POOL_MAX.read(env)
        if pool_max < pool_min:
            raise SettingsError(f"{POOL_MAX.name}={pool_max} is below {POOL_MIN.name}={pool_min}: raise it or lower "
                                "the min")
        return cls(
            max_body_bytes=MAX_BODY_BYTES.read(env),
            pool_min=pool_min,
            pool_max=pool_max,
            pool_timeout=POOL_TIMEOUT.read(env),
            workers=WORKERS.read(env),
            server=SERVER.read(env),
            auth_cache_seconds=AUTH_CACHE_SECONDS.read(env),
            metrics_port=METRICS_PORT.read(env),
            metrics_host=METRICS_HOST.read(env),
            docs=DOCS.read(env),
            statement_timeout=STATEMENT_TIMEOUT.read(env),
            signup_limit=Quota(DEFAULT_SIGNUPS.policy, SIGNUP_LIMIT.read(env), SIGNUP_WINDOW.read(env)),
            write_limit=Quota(DEFAULT_WRITES.policy, WRITE_LIMIT.read(env), WRITE_WINDOW.read(env)),
            webhook_policy=ssrf.policy_from_env(env),
            secret_overlap=SECRET_OVERLAP.read(env),
            read_url=_read_url(env),
            read_after_wait=READ_AFTER_WAIT.read(env),
            read_after_memory=READ_AFTER_MEMORY.read(env),
            replica_retry=REPLICA_RETRY.read(env),
            mastodon_api=MASTODON_API.read(env),
            streams_max=STREAMS_MAX.read(env),
            streams_per_user=STREAMS_PER_USER.read(env),
            stream_buffer=STREAM_BUFFER.read(env),
            stream_heartbeat=STREAM_HEARTBEAT.read(env),
        )


def listen_address(environ: Mapping[str, str] | None = None) -> tuple[str, int]:
    """WALFEED_API_HOST and WALFEED_API_PORT: where `walfeed api` listens, unless its flags say otherwise."""
    env = Env(environ)
    return HOST.read(env), PORT.read(env)


def _read_url(env: Env) -> str | None:
    url = READ_URL.read(env)
    return None if url is None else libpq_url(READ_URL.name, url, " of the replica, or leave it unset")
