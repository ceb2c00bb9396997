"""Settings of `walfeed worker`, read once at start from the environment: the consumer runtime's settings
(services/consumer/settings.py) under the `WALFEED_WORKER_` prefix, with the fan-out worker's defaults and its
threads for large audiences (docs/settings.md, "worker")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from services.consumer.settings import ConsumerSettings, declarations
from services.core.settings import Declared

WorkerSettings = ConsumerSettings  # the worker's settings are a consumer's

DECLARED: Final = declarations("WALFEED_WORKER", batch_size=500, metrics_port=9102, large=True)
SETTINGS: Final[tuple[Declared, ...]] = DECLARED.settings


def from_env(environ: Mapping[str, str] | None = None) -> WorkerSettings:
    return ConsumerSettings.read(DECLARED, environ)
