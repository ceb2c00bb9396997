"""Settings of the api process, read once at start from `WALFEED_API_*` variables.

| variable | default | meaning |
|---|---|---|
| `WALFEED_API_MAX_BODY_BYTES` | `16384` | request bodies larger than this are rejected (413) before parsing |
| `WALFEED_API_POOL_MIN` | `2` | database connections kept open |
| `WALFEED_API_POOL_MAX` | `10` | most database connections open at once |
| `WALFEED_API_POOL_TIMEOUT` | `5.0` | seconds a request waits for a free connection before failing (503) |
| `WALFEED_API_WORKERS` | CPUs | server worker processes, each with its own pool: one per usable CPU by default |
| `WALFEED_API_SERVER` | `granian` | the ASGI server: `granian`, or `uvicorn` (uvloop and httptools; ADR 0111) |
| `WALFEED_API_AUTH_CACHE_SECONDS` | `30.0` | seconds a verified token is remembered per process; 0: off (ADR 0035) |
| `WALFEED_API_METRICS_PORT` | `0` | 0: `/metrics` on the public port; N: only on this separate port instead |
| `WALFEED_API_METRICS_HOST` | `127.0.0.1` | address of that separate metrics port |
| `WALFEED_API_DOCS` | `true` | `false`: no `/docs`, `/redoc` or `/openapi.json` |
| `WALFEED_API_STATEMENT_TIMEOUT` | `2.0` | seconds one database statement may run (`statement_timeout`); then 503 |
| `WALFEED_API_SIGNUP_LIMIT` | `20` | sign-ups per client address per window; 0: no limit (ADR 0033) |
| `WALFEED_API_SIGNUP_WINDOW` | `3600` | that window, in seconds |
| `WALFEED_API_WRITE_LIMIT` | `120` | writes per user per window (posts, follows, webhooks, ...); 0: no limit |
| `WALFEED_API_WRITE_WINDOW` | `60` | that window, in seconds |
| `WALFEED_DATABASE_READ_URL` | unset | a streaming replica for timeline, post and user reads (ADR 0092) |
| `WALFEED_API_READ_AFTER_WAIT` | `0.25` | seconds a read waits for the replica to replay the caller's write |
| `WALFEED_API_READ_AFTER_MEMORY` | `10.0` | seconds this process remembers each user's last write; 0: off |
| `WALFEED_API_REPLICA_RETRY` | `5.0` | seconds reads stay on the primary after the replica failed |
| `WALFEED_WEBHOOK_ALLOWED_NETWORKS` | empty | CIDR networks webhook URLs may resolve to although not public |
| `WALFEED_WEBHOOK_ALLOW_HTTP` | `false` | `true`: plain `http://` webhook URLs are accepted |
| `WALFEED_WEBHOOK_SECRET_OVERLAP` | `86400` | seconds the previous secret keeps signing after a rotation |
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from services.api.ratelimit import Quota
from services.core import ssrf
from services.core.redact import redact
from services.core.settings import Env, SettingsError

# Defaults: a household or office behind one address signs up a few accounts an hour; a person writes far less
# than 2 a second on average (Twitter allowed 2,400 posts a day). Both stop a script, not a user.
SIGNUP_LIMIT: Final = Quota("signup", 20, 3600)
WRITE_LIMIT: Final = Quota("write", 120, 60)
# A rotated webhook secret keeps signing for a day (Svix: 24 h too): time for a receiver to deploy the new one.
SECRET_OVERLAP: Final = 86_400
PUBLIC_HTTPS: Final = ssrf.Policy()
SERVERS: Final = re.compile(r"^(granian|uvicorn)$")  # the default: https, public addresses only


def default_workers() -> int:
    """One server process per CPU this process may use (its affinity, not the machine's count), at most 64: the api
    is CPU-bound per request, and one process runs on one core (ADR 0111)."""
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    return max(1, min(64, len(usable)))


@dataclass(frozen=True, slots=True)
class ApiSettings:
    max_body_bytes: int = 16_384
    pool_min: int = 2
    pool_max: int = 10
    pool_timeout: float = 5.0
    workers: int = field(default_factory=default_workers)
    server: str = "granian"
    auth_cache_seconds: float = 30.0
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    docs: bool = True
    statement_timeout: float = 2.0
    signup_limit: Quota = SIGNUP_LIMIT
    write_limit: Quota = WRITE_LIMIT
    webhook_policy: ssrf.Policy = PUBLIC_HTTPS  # which webhook URLs registration accepts (services/core/ssrf.py)
    secret_overlap: int = SECRET_OVERLAP
    read_url: str | None = None  # WALFEED_DATABASE_READ_URL: the replica (docs/adr/0092)
    read_after_wait: float = 0.25
    read_after_memory: float = 10.0
    replica_retry: float = 5.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ApiSettings:
        env = Env(environ)
        pool_min = env.int("WALFEED_API_POOL_MIN", 2, minimum=0, maximum=1000)
        pool_max = env.int("WALFEED_API_POOL_MAX", 10, minimum=1, maximum=1000)
        if pool_max < pool_min:
            raise SettingsError(
                f"WALFEED_API_POOL_MAX={pool_max} is below WALFEED_API_POOL_MIN={pool_min}: raise it or lower the min"
            )
        return cls(
            max_body_bytes=env.int("WALFEED_API_MAX_BODY_BYTES", 16_384, minimum=64, maximum=16 * 1024 * 1024),
            pool_min=pool_min,
            pool_max=pool_max,
            pool_timeout=env.float("WALFEED_API_POOL_TIMEOUT", 5.0, minimum=0.1, maximum=300.0),
            workers=env.int("WALFEED_API_WORKERS", default_workers(), minimum=1, maximum=64),
            server=env.str("WALFEED_API_SERVER", "granian", pattern=SERVERS),
            auth_cache_seconds=env.float("WALFEED_API_AUTH_CACHE_SECONDS", 30.0, minimum=0.0, maximum=3600.0),
            metrics_port=env.int("WALFEED_API_METRICS_PORT", 0, minimum=0, maximum=65_535),
            metrics_host=env.str("WALFEED_API_METRICS_HOST", "127.0.0.1"),
            docs=env.bool("WALFEED_API_DOCS", True),
            statement_timeout=env.float("WALFEED_API_STATEMENT_TIMEOUT", 2.0, minimum=0.001, maximum=3600.0),
            signup_limit=_quota(env, "WALFEED_API_SIGNUP", SIGNUP_LIMIT),
            write_limit=_quota(env, "WALFEED_API_WRITE", WRITE_LIMIT),
            webhook_policy=ssrf.policy_from_env(env),
            secret_overlap=env.int("WALFEED_WEBHOOK_SECRET_OVERLAP", SECRET_OVERLAP, minimum=0, maximum=30 * 86_400),
            read_url=_read_url(env),
            read_after_wait=env.float("WALFEED_API_READ_AFTER_WAIT", 0.25, minimum=0.0, maximum=10.0),
            read_after_memory=env.float("WALFEED_API_READ_AFTER_MEMORY", 10.0, minimum=0.0, maximum=3600.0),
            replica_retry=env.float("WALFEED_API_REPLICA_RETRY", 5.0, minimum=0.1, maximum=3600.0),
        )


def _read_url(env: Env) -> str | None:
    url = env.optional("WALFEED_DATABASE_READ_URL")
    if url is not None and not url.startswith(("postgresql://", "postgres://")) and "=" not in url:
        raise SettingsError(f"WALFEED_DATABASE_READ_URL={redact(url)!r} is invalid: expected a libpq URL "
                            "(postgresql://...) or key=value connection string of the replica, or leave it unset")
    return url


def _quota(env: Env, prefix: str, default: Quota) -> Quota:
    return Quota(default.policy, env.int(f"{prefix}_LIMIT", default.limit, minimum=0, maximum=1_000_000),
                 env.int(f"{prefix}_WINDOW", default.window, minimum=1, maximum=86_400))
