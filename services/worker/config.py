"""Settings of `walfeed worker`, read once at start from the environment.

| variable | default | meaning |
|---|---|---|
| `WALFEED_WORKER_CONCURRENCY` | `2` | batch threads in this process (several processes may share the queue) |
| `WALFEED_WORKER_BATCH_SIZE` | `500` | most messages applied together in one transaction (docs/adr/0024) |
| `WALFEED_WORKER_LARGE_CONCURRENCY` | `1` | threads fanning out posts whose audience is larger than a chunk |
| `WALFEED_WORKER_PREFETCH` | `batch size x (concurrency + 1)` | unacked messages handed to this process |
| `WALFEED_WORKER_MAX_ATTEMPTS` | `8` | attempts before a message goes to the dead queue |
| `WALFEED_WORKER_RETRY_BASE` | `0.5` | seconds: first retry delay ceiling (doubles per attempt, full jitter) |
| `WALFEED_WORKER_RETRY_CAP` | `60` | seconds: largest retry delay |
| `WALFEED_WORKER_DEAD_MAX_LENGTH` | `100000` | dead letters kept; a full dead queue refuses more (they wait in retry) |
| `WALFEED_WORKER_METRICS_PORT` | `9102` | Prometheus endpoint; `0` turns it off |
| `WALFEED_WORKER_METRICS_HOST` | `127.0.0.1` | address the metrics endpoint binds (unauthenticated: keep it internal) |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from services.core.settings import METRICS_HOST, Env, SettingsError
from services.worker.broker import DEAD_MAX_LENGTH


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    concurrency: int
    batch_size: int
    large_concurrency: int
    prefetch: int
    max_attempts: int
    retry_base: float
    retry_cap: float
    dead_max_length: int
    metrics_port: int
    metrics_host: str

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, prefix: str = "WALFEED_WORKER",
                 batch_size: int = 500, metrics_port: int = 9102, large: bool = True) -> WorkerSettings:
        """The settings of a consumer process: the fan-out worker's (`WALFEED_WORKER_*`), or another's under its
        own `prefix` with its own defaults (the notifier's, services/notifier/config.py). `large`: whether the process
        fans out large audiences on threads of their own (only the fan-out worker does)."""
        env = Env(environ)
        concurrency = env.int(f"{prefix}_CONCURRENCY", 2, minimum=1, maximum=64)
        batch = env.int(f"{prefix}_BATCH_SIZE", batch_size, minimum=1, maximum=5000)
        # One batch waiting for each thread while the threads work: the next batch is ready when one finishes.
        prefetch = env.int(f"{prefix}_PREFETCH", min(65_535, batch * (concurrency + 1)), minimum=1, maximum=65_535)
        if prefetch < concurrency:
            raise SettingsError(
                f"{prefix}_PREFETCH={prefetch} is below {prefix}_CONCURRENCY={concurrency}: "
                "threads would idle; raise the prefetch or lower the concurrency")
        base = env.float(f"{prefix}_RETRY_BASE", 0.5, minimum=0.001, maximum=3600.0)
        cap = env.float(f"{prefix}_RETRY_CAP", 60.0, minimum=0.001, maximum=86_400.0)
        if cap < base:
            raise SettingsError(f"{prefix}_RETRY_CAP={cap} is below {prefix}_RETRY_BASE={base}")
        return cls(
            concurrency=concurrency,
            batch_size=batch,
            large_concurrency=env.int(f"{prefix}_LARGE_CONCURRENCY", 1, minimum=1, maximum=64) if large else 0,
            prefetch=prefetch,
            max_attempts=env.int(f"{prefix}_MAX_ATTEMPTS", 8, minimum=1, maximum=100),
            retry_base=base,
            retry_cap=cap,
            dead_max_length=env.int(f"{prefix}_DEAD_MAX_LENGTH", DEAD_MAX_LENGTH, minimum=1, maximum=100_000_000),
            metrics_port=env.int(f"{prefix}_METRICS_PORT", metrics_port, minimum=0, maximum=65_535),
            metrics_host=env.str(f"{prefix}_METRICS_HOST", "127.0.0.1", METRICS_HOST),
        )
