"""Typed settings, read from the environment once at process start, each declared once.

Every setting is one declaration (`Int`, `Float`, `Str`, `Choice`, `Flag`, `Optional`, `Secret`, `Duration`):
its variable, default, bounds and meaning. A process's settings object reads its declarations in `from_env`, so the
default exists in one place; docs/settings.md is generated from the same declarations
(`python -m services.cli.settings_doc > docs/settings.md`, ADR 0130). Every process builds one settings object in
its entrypoint; a missing or invalid value raises `SettingsError` naming the variable, and the CLI turns that into
a one-line message and exit code 2.
"""

from __future__ import annotations

import builtins
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar, Final, Generic, Protocol, TypeVar

from services.core import durations, nodes, queues
from services.core.redact import redact

T = TypeVar("T", int, float)

_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")
_SLOT = re.compile(r"^[a-z0-9_]{1,63}$")
_VARIABLE = re.compile(r"WALFEED_[A-Z0-9_]{1,100}")  # a credential's file name: never a path
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_INTEGER = re.compile(r"[+-]?[0-9]+")  # ASCII digits only: not 1_000, not a digit of another script
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")  # and never nan or inf

# A bind address: an IPv4/IPv6 address or a host name (no scheme, no port).
BIND_ADDRESS = re.compile(r"^[A-Za-z0-9.:\-]{1,253}$")
METRICS_HOST = BIND_ADDRESS  # its former name, for code written before the declarations


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
        directory = self._environ.get(CREDENTIALS_DIRECTORY.name)
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
        text = raw.strip(" \t\r\n")  # ASCII blanks only: str.strip would take a no-break space too
        pattern = _INTEGER if kind is int else _NUMBER
        try:
            if not pattern.fullmatch(text):
                raise ValueError(text)
            value = kind(text)
            if not math.isfinite(value):
                raise ValueError(text)
        except (ValueError, OverflowError):  # 1_000, a digit of another script, nan, inf, 1e999
            raise SettingsError(f"{name}={raw!r} is invalid: expected {'an integer' if kind is int else 'a number'}"
                                ) from None
        if value < minimum or (maximum is not None and value > maximum):
            bounds = f"at least {minimum}" if maximum is None else f"between {minimum} and {maximum}"
            raise SettingsError(f"{name}={raw!r} is out of range: it must be {bounds}")
        return value


# --- Declarations: one per setting ---------------------------------------------------------------------------


class Declared(Protocol):
    """What docs/settings.md shows of a setting (services/cli/settings_doc.py writes the page from these)."""

    @property
    def name(self) -> builtins.str: ...
    @property
    def meaning(self) -> builtins.str: ...
    def shown_default(self) -> builtins.str: ...
    def values(self) -> builtins.str: ...


def _show(value: builtins.int | builtins.float | builtins.str) -> builtins.str:
    if isinstance(value, builtins.float) and value.is_integer():
        return builtins.str(builtins.int(value))
    return builtins.str(value)


@dataclass(frozen=True, slots=True)
class _Number(Generic[T]):
    """An integer or a number within bounds. `default` may be a function (computed when read, e.g. from the CPUs)
    or None where the parse works it out from other settings and passes it to `read`; `shown` then says it."""

    name: builtins.str
    default: T | Callable[[], T] | None
    meaning: builtins.str
    minimum: T
    maximum: T | None = None
    shown: builtins.str | None = None
    kind: ClassVar[builtins.str]

    def default_value(self) -> T:
        if self.default is None:
            raise TypeError(f"{self.name} has no declared default: its parse passes one to read()")
        return self.default() if callable(self.default) else self.default

    def shown_default(self) -> builtins.str:
        return self.shown if self.shown is not None else f"`{_show(self.default_value())}`"

    def values(self) -> builtins.str:
        if self.maximum is None:
            return f"{self.kind}, {_show(self.minimum)} or more"
        return f"{self.kind}, {_show(self.minimum)} to {_show(self.maximum)}"


@dataclass(frozen=True, slots=True)
class Int(_Number[builtins.int]):
    minimum: builtins.int = 0
    kind: ClassVar[builtins.str] = "integer"

    def read(self, env: Env, default: builtins.int | None = None) -> builtins.int:
        return env.int(self.name, self.default_value() if default is None else default, self.minimum, self.maximum)


@dataclass(frozen=True, slots=True)
class Float(_Number[builtins.float]):
    minimum: builtins.float = 0.0
    kind: ClassVar[builtins.str] = "number"

    def read(self, env: Env, default: builtins.float | None = None) -> builtins.float:
        return env.float(self.name, self.default_value() if default is None else default, self.minimum,
                         self.maximum)


@dataclass(frozen=True, slots=True)
class Str:
    """A text; blank is an error (unset it for the default). `allowed` says in docs what `pattern` accepts."""

    name: builtins.str
    default: builtins.str
    meaning: builtins.str
    pattern: re.Pattern[builtins.str] | None = None
    allowed: builtins.str | None = None

    def read(self, env: Env) -> builtins.str:
        return env.str(self.name, self.default, self.pattern)

    def shown_default(self) -> builtins.str:
        return f"`{self.default}`"

    def values(self) -> builtins.str:
        if self.allowed is not None:
            return self.allowed
        return "text" if self.pattern is None else f"`{self.pattern.pattern}`"


@dataclass(frozen=True, slots=True)
class Choice:
    """One of a few words, in any case (read in lower case); `hint` ends the error message."""

    name: builtins.str
    default: builtins.str
    choices: tuple[builtins.str, ...]
    meaning: builtins.str
    hint: builtins.str = ""

    def read(self, env: Env) -> builtins.str:
        value = env.str(self.name, self.default).lower()
        if value not in self.choices:
            raise SettingsError(f"{self.name}={value!r} is invalid: expected one of {', '.join(self.choices)}"
                                f"{self.hint}")
        return value

    def shown_default(self) -> builtins.str:
        return f"`{self.default}`"

    def values(self) -> builtins.str:
        return ", ".join(f"`{choice}`" for choice in self.choices)


@dataclass(frozen=True, slots=True)
class Flag:
    name: builtins.str
    default: builtins.bool
    meaning: builtins.str

    def read(self, env: Env) -> builtins.bool:
        return env.bool(self.name, self.default)

    def shown_default(self) -> builtins.str:
        return "`true`" if self.default else "`false`"

    def values(self) -> builtins.str:
        return "`true` or `false` (`1`/`0`, `yes`/`no`, `on`/`off`)"


@dataclass(frozen=True, slots=True)
class OptionalStr:
    """A text that may be unset (None); its parse checks what `allowed` says, the declaration reads it."""

    name: builtins.str
    meaning: builtins.str
    allowed: builtins.str = "text"
    shown: builtins.str = "unset"

    def read(self, env: Env) -> builtins.str | None:
        return env.optional(self.name)

    def shown_default(self) -> builtins.str:
        return self.shown

    def values(self) -> builtins.str:
        return self.allowed


@dataclass(frozen=True, slots=True)
class Secret:
    """A required secret, no default; errors never include the value."""

    name: builtins.str
    meaning: builtins.str
    min_length: builtins.int

    def read(self, env: Env) -> builtins.str:
        return env.secret(self.name, self.min_length)

    def shown_default(self) -> builtins.str:
        return "required"

    def values(self) -> builtins.str:
        return f"text, {self.min_length} characters or more"


def _duration(name: builtins.str, raw: builtins.str) -> timedelta:
    try:
        return durations.parse(raw)
    except durations.DurationError as exc:
        raise SettingsError(f"{name}: {exc}") from None


@dataclass(frozen=True, slots=True)
class Duration:
    """A duration as operators write it (`7d`, `90s`; services/core/durations.py)."""

    name: builtins.str
    default: builtins.str
    meaning: builtins.str

    def read(self, env: Env) -> timedelta:
        return _duration(self.name, env.optional(self.name) or self.default)

    def shown_default(self) -> builtins.str:
        return f"`{self.default}`"

    def values(self) -> builtins.str:
        return _DURATIONS


@dataclass(frozen=True, slots=True)
class OptionalDuration:
    """A duration that is off (None) while unset."""

    name: builtins.str
    meaning: builtins.str

    def read(self, env: Env) -> timedelta | None:
        raw = env.optional(self.name)
        return None if raw is None else _duration(self.name, raw)

    def shown_default(self) -> builtins.str:
        return "unset: off"

    def values(self) -> builtins.str:
        return _DURATIONS


_DURATIONS: Final = "a duration: `90s`, `15m`, `6h`, `7d`, `1d12h`, `0`"


def libpq_url(name: builtins.str, url: builtins.str, what: builtins.str = "") -> builtins.str:
    """`url` if it is a libpq URL or key=value string, else a SettingsError naming `name` (never the password)."""
    if not url.startswith(("postgresql://", "postgres://")) and "=" not in url:
        raise SettingsError(f"{name}={redact(url)!r} is invalid: expected a libpq URL (postgresql://...) or "
                            f"key=value connection string{what}")
    return url


# --- The settings every process shares ---------------------------------------------------------------------------

LIBPQ: Final = "a libpq URL (`postgresql://...`) or `key=value` string"
DATABASE_URL: Final = Str(
    "WALFEED_DATABASE_URL", "postgresql:///walfeed",
    "the database; the password may come from `PGPASSWORD`", allowed=LIBPQ)
AMQP_URL: Final = Str(
    "WALFEED_AMQP_URL", "amqp://guest:guest@localhost:5672/%2F",
    "the broker; the api never connects to it. A cluster: one URL per node, comma-separated, all naming the same "
    "vhost; processes connect to the first that answers and fail over to the others (docs/amqp.md, \"A cluster\")",
    allowed="`amqp://` or `amqps://` URLs, comma-separated")
AMQP_QUEUE_TYPE: Final = Choice(
    "WALFEED_AMQP_QUEUE_TYPE", queues.CLASSIC, queues.QUEUE_TYPES,
    "the type of every queue walfeed declares (quorum: RabbitMQ 3.10 or later, where a cluster runs), the same for "
    "every process; a queue's type never changes once declared (docs/amqp.md, \"Queue types\"; ADR 0090)",
    hint=" (quorum needs RabbitMQ 3.10 or later)")
AMQP_PREFIX: Final = Str("WALFEED_AMQP_PREFIX", "walfeed", "prefix of every exchange and queue (docs/amqp.md)", _NAME)
SLOT: Final = Str("WALFEED_SLOT", "walfeed", "logical replication slot", _SLOT)
CELEBRITY_THRESHOLD: Final = Int(
    "WALFEED_CELEBRITY_THRESHOLD", 10_000,
    "follower count from which an author's posts are merged at read time instead of fanned out", minimum=1)
CREDENTIALS_DIRECTORY: Final = OptionalStr(  # Env reads it for every other variable
    "CREDENTIALS_DIRECTORY",
    "set by systemd for a unit with `LoadCredential=` (deploy/systemd): a `WALFEED_*` setting missing from the "
    "environment is read from the file of its name in this directory, e.g. "
    "`LoadCredential=WALFEED_DATABASE_URL:/etc/walfeed/credentials/api/WALFEED_DATABASE_URL`, so passwords stay out "
    "of the environment (readable only by the unit's user)", allowed="a directory")
SHARED: Final = (DATABASE_URL, AMQP_URL, AMQP_QUEUE_TYPE, AMQP_PREFIX, SLOT, CELEBRITY_THRESHOLD)


@dataclass(frozen=True, slots=True)
class Settings:
    """The settings every walfeed process shares (docs/settings.md)."""

    database_url: str
    amqp_url: str  # one or more node URLs, comma-separated (services/core/nodes.py)
    amqp_prefix: str
    slot: str
    celebrity_threshold: int
    amqp_queue_type: str = AMQP_QUEUE_TYPE.default  # classic or quorum (services/core/queues.py)

    @property
    def amqp_nodes(self) -> tuple[str, ...]:
        return nodes.split(self.amqp_url)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = Env(environ)
        database_url = libpq_url(DATABASE_URL.name, DATABASE_URL.read(env))
        amqp_url = AMQP_URL.read(env)
        try:
            nodes.split(amqp_url)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        queue_type = AMQP_QUEUE_TYPE.read(env)
        return cls(
            database_url=database_url,
            amqp_url=amqp_url,
            amqp_prefix=AMQP_PREFIX.read(env),
            slot=SLOT.read(env),
            celebrity_threshold=CELEBRITY_THRESHOLD.read(env),
            amqp_queue_type=queue_type,
        )
