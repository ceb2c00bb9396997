"""Typed settings, read from the environment once at process start.

Every process builds one settings object in its entrypoint; a missing or invalid value raises
`SettingsError` naming the variable, and the CLI turns that into a one-line message and exit code 2.
"""

from __future__ import annotations

import builtins
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from services.core import nodes, queues
from services.core.redact import redact

T = TypeVar("T", int, float)

_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")
_SLOT = re.compile(r"^[a-z0-9_]{1,63}$")
_VARIABLE = re.compile(r"WALFEED_[A-Z0-9_]{1,100}")  # a credential's file name: never a path
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})

# A metrics endpoint's bind address: an IPv4/IPv6 address or a host name (no scheme, no port).
METRICS_HOST = re.compile(r"^[A-Za-z0-9.:\-]{1,253}$")


class SettingsError(Exception):
    """A setting is missing or invalid. The message names the environment variable."""


class Env:
    """Reads typed values from an environment mapping; every error names the variable."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = os.environ if environ is None else environ

    def _get(self, name: builtins.str, default: builtins.str | None = None) -> builtins.str | None:
        """The variable, else the credential of that name that systemd's LoadCredential= put in
        $CREDENTIALS_DIRECTORY (deploy/systemd: secrets out of the environment), else `default`."""
        value = self._environ.get(name)
        directory = self._environ.get("CREDENTIALS_DIRECTORY")
        if value is not None or not directory or not _VARIABLE.fullmatch(name):
            return default if value is None else value
        path = os.path.join(directory, name)
        try:
            with open(path, encoding="utf-8") as file:
                return file.read().rstrip("\r\n")
        except FileNotFoundError:
            return default
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(f"{name}: the credential {path} cannot be read ({type(exc).__name__})") from None

    def str(
        self, name: builtins.str, default: builtins.str, pattern: re.Pattern[builtins.str] | None = None
    ) -> builtins.str:
        value = (self._get(name, default) or "").strip()
        if not value:
            raise SettingsError(f"{name} is empty; set it or unset it to use the default {default!r}")
        if pattern is not None and not pattern.match(value):
            raise SettingsError(f"{name}={value!r} is invalid: it must match {pattern.pattern}")
        return value

    def bool(self, name: builtins.str, default: builtins.bool) -> builtins.bool:
        raw = (self._get(name) or "").strip().lower()
        if not raw:
            return default
        if raw in _TRUE or raw in _FALSE:
            return raw in _TRUE
        raise SettingsError(f"{name}={raw!r} is invalid: expected one of {', '.join(sorted(_TRUE | _FALSE))}")

    def optional(self, name: builtins.str) -> builtins.str | None:
        """The value, or None when the variable is unset or blank."""
        value = (self._get(name) or "").strip()
        return value or None

    def secret(self, name: builtins.str, min_length: builtins.int) -> builtins.str:
        """A required secret (no default). Error messages never include the value."""
        value = self._get(name) or ""
        if not value.strip():
            raise SettingsError(f"{name} is not set: it has no default, set it to a secret of at least "
                                f"{min_length} characters")
        if len(value) < min_length or value != value.strip():
            raise SettingsError(f"{name} is invalid: it must be at least {min_length} characters, "
                                "without leading or trailing whitespace")
        return value

    def int(self, name: builtins.str, default: builtins.int, minimum: builtins.int = 0,
            maximum: builtins.int | None = None) -> builtins.int:
        return self._number(name, default, int, minimum, maximum)

    def float(self, name: builtins.str, default: builtins.float, minimum: builtins.float = 0.0,
              maximum: builtins.float | None = None) -> builtins.float:
        return self._number(name, default, float, minimum, maximum)

    def _number(self, name: builtins.str, default: T, kind: type[T], minimum: T, maximum: T | None) -> T:
        raw = self._get(name)
        if raw is None or raw.strip() == "":
            return default
        try:
            value = kind(raw.strip())
        except ValueError:
            raise SettingsError(f"{name}={raw!r} is invalid: expected a {kind.__name__}") from None
        if value < minimum or (maximum is not None and value > maximum):
            bounds = f"at least {minimum}" if maximum is None else f"between {minimum} and {maximum}"
            raise SettingsError(f"{name}={raw!r} is out of range: it must be {bounds}")
        return value


@dataclass(frozen=True, slots=True)
class Settings:
    """The settings every walfeed process shares (docs/settings.md)."""

    database_url: str
    amqp_url: str  # one or more node URLs, comma-separated (services/core/nodes.py)
    amqp_prefix: str
    slot: str
    celebrity_threshold: int
    amqp_queue_type: str = queues.CLASSIC  # classic or quorum (services/core/queues.py)

    @property
    def amqp_nodes(self) -> tuple[str, ...]:
        return nodes.split(self.amqp_url)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = Env(environ)
        database_url = env.str("WALFEED_DATABASE_URL", "postgresql:///walfeed")
        if not database_url.startswith(("postgresql://", "postgres://")) and "=" not in database_url:
            raise SettingsError(
                f"WALFEED_DATABASE_URL={redact(database_url)!r} is invalid: expected a libpq URL "
                "(postgresql://...) or key=value connection string"
            )
        amqp_url = env.str("WALFEED_AMQP_URL", "amqp://guest:guest@localhost:5672/%2F")
        try:
            nodes.split(amqp_url)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        queue_type = env.str("WALFEED_AMQP_QUEUE_TYPE", queues.CLASSIC).lower()
        if queue_type not in queues.QUEUE_TYPES:
            raise SettingsError(f"WALFEED_AMQP_QUEUE_TYPE={queue_type!r} is invalid: expected one of "
                                f"{', '.join(queues.QUEUE_TYPES)} (quorum needs RabbitMQ 3.10 or later)")
        return cls(
            database_url=database_url,
            amqp_url=amqp_url,
            amqp_prefix=env.str("WALFEED_AMQP_PREFIX", "walfeed", _NAME),
            slot=env.str("WALFEED_SLOT", "walfeed", _SLOT),
            celebrity_threshold=env.int("WALFEED_CELEBRITY_THRESHOLD", 10_000, minimum=1),
            amqp_queue_type=queue_type,
        )
