"""Settings of a consumer process of the events exchange, read once at start from the environment, under the
consumer's own prefix: the fan-out worker's (`WALFEED_WORKER_*`, services/worker/config.py), the notifier's
(`WALFEED_NOTIFIER_*`, services/notifier/config.py), the next one's (docs/consumers.md).

`declarations(prefix, ...)` declares a consumer's settings once (services/core/settings.py): the variable, default,
bounds and meaning of each; the consumer's config module keeps the result, `ConsumerSettings.read` reads it, and
docs/settings.md shows it (services/cli/settings_doc.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from services.consumer.broker import DEAD_MAX_LENGTH
from services.core.settings import BIND_ADDRESS, Declared, Env, Float, Int, SettingsError, Str

MAX_PREFETCH = 65_535  # AMQP's prefetch count is a 16-bit number


@dataclass(frozen=True, slots=True)
class ConsumerDeclarations:
    """One consumer's settings, each declared once under its prefix."""

    concurrency: Int
    batch_size: Int
    large_concurrency: Int | None  # None: the consumer has no threads of its own for large audiences
    prefetch: Int
    max_attempts: Int
    retry_base: Float
    retry_cap: Float
    dead_max_length: Int
    metrics_port: Int
    metrics_host: Str

    @property
    def settings(self) -> tuple[Declared, ...]:
        """In the order docs/settings.md lists them."""
        large = () if self.large_concurrency is None else (self.large_concurrency,)
        return (self.concurrency, self.batch_size, *large, self.prefetch, self.max_attempts, self.retry_base,
                self.retry_cap, self.dead_max_length, self.metrics_port, self.metrics_host)


def declarations(prefix: str, *, batch_size: int, metrics_port: int, large: bool = False) -> ConsumerDeclarations:
    """The settings of the consumer whose variables start with `prefix` (`WALFEED_WORKER`), with its own batch
    size and metrics port. `large`: whether it fans out large audiences on threads of their own (only the fan-out
    worker does)."""
    return ConsumerDeclarations(
        concurrency=Int(f"{prefix}_CONCURRENCY", 2,
                        "batch threads in this process (several processes may share the queue)", minimum=1,
                        maximum=64),
        batch_size=Int(f"{prefix}_BATCH_SIZE", batch_size,
                       "most events applied together in one transaction (ADR 0024); a group of events (ADR 0095) is "
                       "never split, so a batch holds at least one message", minimum=1, maximum=5000),
        large_concurrency=Int(f"{prefix}_LARGE_CONCURRENCY", 1,
                              "threads fanning out posts whose audience is larger than a chunk", minimum=1,
                              maximum=64) if large else None,
        prefetch=Int(f"{prefix}_PREFETCH", None,
                     f"unacked messages handed to this process (with groups, each up to `WALFEED_RELAY_GROUP_MAX` "
                     f"events); not below `{prefix}_CONCURRENCY`", minimum=1, maximum=MAX_PREFETCH,
                     shown=f"batch size x (concurrency + 1), at most {MAX_PREFETCH}"),
        max_attempts=Int(f"{prefix}_MAX_ATTEMPTS", 8, "attempts before a message goes to the consumer's dead queue",
                         minimum=1, maximum=100),
        retry_base=Float(f"{prefix}_RETRY_BASE", 0.5,
                         "seconds: first retry delay ceiling (doubles per attempt, full jitter)", minimum=0.001,
                         maximum=3600.0),
        retry_cap=Float(f"{prefix}_RETRY_CAP", 60.0, "seconds: largest retry delay (not below the base)",
                        minimum=0.001, maximum=86_400.0),
        dead_max_length=Int(f"{prefix}_DEAD_MAX_LENGTH", DEAD_MAX_LENGTH,
                            "dead letters kept; a full dead queue refuses more (they wait in retry)", minimum=1,
                            maximum=100_000_000),
        metrics_port=Int(f"{prefix}_METRICS_PORT", metrics_port, "Prometheus endpoint; `0` turns it off", minimum=0,
                         maximum=65_535),
        metrics_host=Str(f"{prefix}_METRICS_HOST", "127.0.0.1",
                         "address the metrics endpoint binds (unauthenticated: keep it internal)", BIND_ADDRESS,
                         allowed="an address or host name"),
    )


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
    def from_env(cls, environ: Mapping[str, str] | None = None, *, prefix: str, batch_size: int, metrics_port: int,
                 large: bool = False) -> ConsumerSettings:
        """The settings of the consumer `declarations(prefix, ...)` declares, read from the environment."""
        return cls.read(declarations(prefix, batch_size=batch_size, metrics_port=metrics_port, large=large), environ)

    @classmethod
    def read(cls, declared: ConsumerDeclarations, environ: Mapping[str, str] | None = None) -> ConsumerSettings:
        env = Env(environ)
        concurrency = declared.concurrency.read(env)
        batch = declared.batch_size.read(env)
        # One batch waiting for each thread while the threads work: the next batch is ready when one finishes.
        prefetch = declared.prefetch.read(env, default=min(MAX_PREFETCH, batch * (concurrency + 1)))
        if prefetch < concurrency:
            raise SettingsError(
                f"{declared.prefetch.name}={prefetch} is below {declared.concurrency.name}={concurrency}: "
                "threads would idle; raise the prefetch or lower the concurrency")
        base, cap = declared.retry_base.read(env), declared.retry_cap.read(env)
        if cap < base:
            raise SettingsError(f"{declared.retry_cap.name}={cap} is below {declared.retry_base.name}={base}")
        large = declared.large_concurrency
        return cls(
            concurrency=concurrency,
            batch_size=batch,
            large_concurrency=0 if large is None else large.read(env),
            prefetch=prefetch,
            max_attempts=declared.max_attempts.read(env),
            retry_base=base,
            retry_cap=cap,
            dead_max_length=declared.dead_max_length.read(env),
            metrics_port=declared.metrics_port.read(env),
            metrics_host=declared.metrics_host.read(env),
        )
