"""Settings of the api process, read once at start from `WALFEED_API_*` variables.

| variable | default | meaning |
|---|---|---|
| `WALFEED_API_MAX_BODY_BYTES` | `16384` | request bodies larger than this are rejected (413) before parsing |
| `WALFEED_API_POOL_MIN` | `2` | database connections kept open |
| `WALFEED_API_POOL_MAX` | `10` | most database connections open at once |
| `WALFEED_API_POOL_TIMEOUT` | `5.0` | seconds a request waits for a free connection before failing (503) |
| `WALFEED_API_WORKERS` | `1` | uvicorn worker processes (each with its own pool); above 1, /metrics aggregates all |
| `WALFEED_API_AUTH_CACHE_SECONDS` | `30.0` | seconds a verified token -> user id is remembered per process; 0: off |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from services.core.settings import Env, SettingsError


@dataclass(frozen=True, slots=True)
class ApiSettings:
    max_body_bytes: int = 16_384
    pool_min: int = 2
    pool_max: int = 10
    pool_timeout: float = 5.0
    workers: int = 1
    auth_cache_seconds: float = 30.0

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
            workers=env.int("WALFEED_API_WORKERS", 1, minimum=1, maximum=64),
            auth_cache_seconds=env.float("WALFEED_API_AUTH_CACHE_SECONDS", 30.0, minimum=0.0, maximum=3600.0),
        )
