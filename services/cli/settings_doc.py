"""docs/settings.md, written from the settings' declarations (services/core/settings.py, ADR 0130):

    python -m services.cli.settings_doc > docs/settings.md

Each process's settings module declares its settings once (variable, default, bounds, meaning); this module only
groups them per process and adds the prose around the tables. tests/unit/test_docs.py fails when the checked-in
page differs from what this prints.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from services.api import config as api
from services.cdc_relay import config as relay
from services.cdc_relay import poll_policy as poll
from services.cli import prune, roles
from services.core import logs, settings, tracing
from services.core.settings import Declared
from services.delivery import config as delivery
from services.embedding import config as embedder


@dataclass(frozen=True, slots=True)
class Fixed:
    """A row for variables walfeed's processes do not read (the test harness's, the benchmarks')."""

    names: tuple[str, ...]
    shown: str
    meaning: str

    @property
    def name(self) -> str:
        return self.names[0]

    def shown_default(self) -> str:
        return self.shown

    def values(self) -> str:
        return ""


@dataclass(frozen=True, slots=True)
class Section:
    heading: str  # "## ..." or "### ...", or "" for a table that follows the previous one
    intro: str
    settings: Sequence[Declared | Fixed]
    outro: str = ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _variables(setting: Declared | Fixed) -> str:
    return ", ".join(f"`{name}`" for name in (setting.names if isinstance(setting, Fixed) else (setting.name,)))


def table(rows: Sequence[Declared | Fixed]) -> str:
    """One row per setting; the values column only where a row has bounds or choices to show."""
    with_values = any(row.values() for row in rows)
    head = "| variable | default | values | meaning |\n|---|---|---|---|" if with_values else \
        "| variable | default | meaning |\n|---|---|---|"
    lines = [head]
    for row in rows:
        cells = [_variables(row), row.shown_default(), *([row.values()] if with_values else []), row.meaning]
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines)


def render(sections: Sequence[Section]) -> str:
    parts = [HEADER]
    for section in sections:
        parts.extend(part for part in (section.heading, section.intro) if part)
        if section.settings:
            parts.append(table(section.settings))
        if section.outro:
            parts.append(section.outro)
    return "\n\n".join(parts) + "\n"


HEADER: Final = """# Settings

Every walfeed process is configured by environment variables, read once at start; a missing or invalid value stops
the process with the variable named (exit code 2). Command-line flags of the same name override them (`walfeed
--database-url ... api`). Each setting is declared once, in its process's settings module (variable, default,
bounds, meaning; docs/adr/0130-settings-declared-once.md), and this page is generated from those declarations:
`python -m services.cli.settings_doc > docs/settings.md`. `tests/unit/test_docs.py` fails when this page differs
from what that prints, or when the code reads a variable no declaration names."""

_CONSUMERS: Final = """## worker (`walfeed worker`)

`services/worker/config.py`.

| variable | default | meaning |
|---|---|---|
| `WALFEED_WORKER_CONCURRENCY` | `2` | batch threads in this process (several processes may share the queue) |
| `WALFEED_WORKER_BATCH_SIZE` | `500` | most events applied together in one transaction (ADR 0024); a group of events (ADR 0095) is never split, so a batch holds at least one message |
| `WALFEED_WORKER_LARGE_CONCURRENCY` | `1` | threads fanning out posts whose audience is larger than a chunk |
| `WALFEED_WORKER_PREFETCH` | batch size x (concurrency + 1) | unacked messages handed to this process (with groups, each up to `WALFEED_RELAY_GROUP_MAX` events) |
| `WALFEED_WORKER_MAX_ATTEMPTS` | `8` | attempts before a message goes to the dead queue |
| `WALFEED_WORKER_RETRY_BASE` | `0.5` | seconds: first retry delay ceiling (doubles per attempt, full jitter) |
| `WALFEED_WORKER_RETRY_CAP` | `60` | seconds: largest retry delay |
| `WALFEED_WORKER_DEAD_MAX_LENGTH` | `100000` | dead letters kept; a full dead queue refuses more (they wait in retry) |
| `WALFEED_WORKER_METRICS_PORT` | `9102` | Prometheus endpoint; `0` turns it off |
| `WALFEED_WORKER_METRICS_HOST` | `127.0.0.1` | address the metrics endpoint binds (unauthenticated: keep it internal) |

## notifier (`walfeed notifier`)

`services/notifier/config.py`: the worker's consumer settings under their own prefix (docs/notifications.md).

| variable | default | meaning |
|---|---|---|
| `WALFEED_NOTIFIER_CONCURRENCY` | `2` | batch threads in this process (several processes may share the queue) |
| `WALFEED_NOTIFIER_BATCH_SIZE` | `100` | most events applied together in one transaction (a group is never split) |
| `WALFEED_NOTIFIER_PREFETCH` | `batch size x (concurrency + 1)` | unacked messages handed to this process (with groups, each up to `WALFEED_RELAY_GROUP_MAX` events) |
| `WALFEED_NOTIFIER_MAX_ATTEMPTS` | `8` | attempts before a message goes to `{prefix}.notifier.dead` |
| `WALFEED_NOTIFIER_RETRY_BASE` | `0.5` | seconds: first retry delay ceiling (doubles per attempt, full jitter) |
| `WALFEED_NOTIFIER_RETRY_CAP` | `60` | seconds: largest retry delay |
| `WALFEED_NOTIFIER_DEAD_MAX_LENGTH` | `100000` | dead letters kept; a full dead queue refuses more |
| `WALFEED_NOTIFIER_METRICS_PORT` | `9104` | Prometheus endpoint; `0` turns it off |
| `WALFEED_NOTIFIER_METRICS_HOST` | `127.0.0.1` | address of the metrics endpoint (unauthenticated) |
| `WALFEED_NOTIFIER_AUTHOR_DELIVERIES` | `600` | webhook and email deliveries the events of one author (a post's author, a follower) may cause per window, all notifiers together; past it the notifications are in-app only (ADR 0100); `0`: no budget |
| `WALFEED_NOTIFIER_AUTHOR_WINDOW` | `3600` | seconds: the author budget's fixed window, of the database clock |"""  # noqa: E501 - worker, notifier: not yet declared (ADR 0130)

_HARNESS: Final = (
    Fixed(("WALFEED_SKIP_LINT",), "`0`", "`1`: `scripts/test` skips ruff, mypy and the packaging check"),
    Fixed(("WALFEED_SKIP_PACKAGING",), "`0`",
          "`1`: `scripts/test` skips `scripts/check-packaging.sh` (a plain `pip install .` in a fresh virtualenv: "
          "every module imports, every command answers `--help`)"),
    Fixed(("WALFEED_SKIP_INFRA",), "`0`", "`1`: `scripts/setup-infra.sh` leaves PostgreSQL and RabbitMQ as they are"),
    Fixed(("WALFEED_PG_VERSION", "WALFEED_PG_CLUSTER"), "newest, `main`",
          "the Debian cluster `scripts/setup-infra.sh` configures"),
    Fixed(("WALFEED_TEST_INFRA",), "`auto`", "`local`, `docker` (testcontainers) or `auto`"),
    Fixed(("WALFEED_TEST_PG_URL", "WALFEED_TEST_AMQP_URL"), "local superuser, guest",
          "the servers the tests use (admin rights)"),
    Fixed(("WALFEED_CHAOS_SECONDS", "_FAULTS", "_SEED", "_KINDS"), "45, 8, 3, all",
          "the chaos run (tests/chaos/test_convergence.py)"),
    Fixed(("WALFEED_TEST_PG_BIN",), "`/usr/lib/postgresql/15/bin`",
          "the server binaries of the private primary + standby clusters the harness starts (testkit/pgcluster.py)"),
    Fixed(("WALFEED_BENCH_PG_URL", "WALFEED_BENCH_AMQP_URL"), "local superuser, guest",
          "the servers of every bench/ script (`bench/lib/infra.py`; an admin connection)"),
)

SECTIONS: Final = (
    Section("## Shared by every process",
            "`services/core/settings.py`, flags of the `walfeed` command (`services/cli/__init__.py`).",
            (*settings.SHARED, logs.LEVEL, logs.FORMAT, settings.CREDENTIALS_DIRECTORY)),
    Section("### Traces",
            "OpenTelemetry's own variables, read by every process (`services/core/tracing.py`, ADR 0072). Tracing "
            "needs the\n`otel` extra (`pip install 'walfeed[otel]'`; the Docker image and `scripts/bootstrap.sh` "
            "install it). Without an\nendpoint nothing is traced or exported and OpenTelemetry is not even imported; "
            "the outbox rows still get their trace\ncontext and the log lines their `trace_id`.",
            tracing.SETTINGS),
    Section("## api (`walfeed api`)", "`services/api/config.py`, and the `api` command's flags.", api.SETTINGS),
    Section("## relay (`walfeed relay`)", "`services/cdc_relay/config.py`.", relay.SETTINGS),
    Section("", "With `walfeed relay --source poll` (`services/cdc_relay/poll_policy.py`; window, metrics, shutdown "
            "and blocked\ntimeouts are the relay's above):", poll.SETTINGS),
    Section(_CONSUMERS, "", ()),
    Section("## delivery (`walfeed deliver --channel webhook|email`)",
            "`services/delivery/config.py`; what they mean for a delivery: docs/notifications.md. The two "
            "`WALFEED_WEBHOOK_*`\nsettings are read by the api too, when a webhook is registered "
            "(`services/delivery/ssrf.py`).", delivery.SETTINGS),
    Section("## prune-notifications (`walfeed prune-notifications`)", "`services/cli/prune.py`.", (prune.RETENTION,)),
    Section("## bootstrap-roles (`walfeed bootstrap-roles`, `walfeed up`)",
            "`services/cli/roles.py`. Run with a Postgres superuser as `WALFEED_DATABASE_URL` and the broker's admin "
            "rights.", roles.SETTINGS, "`walfeed up` generates, for its run, any password not set."),
    Section("## embedder (`services/embedding`, for the coming search consumer)",
            "`services/embedding/config.py`: which embedder turns posts and queries into vectors (docs/search.md,\n"
            "docs/adr/0120-local-embedding-model.md). No process reads these yet; the search consumer will.",
            embedder.SETTINGS),
    Section("## Tests and benchmarks", "Read by the test harness, scripts and benchmarks, not by walfeed's processes.",
            _HARNESS),
)


def page() -> str:
    return render(SECTIONS)


def main() -> None:
    sys.stdout.write(page())


if __name__ == "__main__":
    main()
