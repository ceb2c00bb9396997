"""Settings of a consumer process of the events exchange, read once at start from the environment, under the
consumer's own prefix: the fan-out worker's (`WALFEED_WORKER_*`, the table in services/worker/config.py), the
notifier's (`WALFEED_NOTIFIER_*`, services/notifier/config.py), the next one's (docs/consumers.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from services.consumer.broker import DEAD_MAX_LENGTH
from services.core.settings import METRICS_HOST, Env, SettingsError


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
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
                 batch_size: int = 500, metrics_port: int = 9102, large: bool = True) -> ConsumerSettings:
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
