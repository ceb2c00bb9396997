"""docs/settings.md, written from the settings' declarations (services/core/settings.py, ADR 0130):

    python -m services.cli.settings_doc > docs/settings.md

Each process's settings module declares its settings once (variable, default, bounds, meaning); this module only
groups them per process and adds the prose around the tables. tests/unit/test_docs.py fails when the checked-in
page differs from what this prints.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from services.api import config as api
from services.cdc_relay import config as relay
from services.cli import ops_args, roles
from services.core import logs, settings, tracing
from services.core.embedding import config as embedder
from services.core.settings import Declared
from services.delivery import config as delivery
from services.embedder import config as embed
from services.notifier import config as notifier
from services.worker import config as worker


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


_CODE: Final = re.compile(r"`[^`]*`")


def prose(text: str) -> str:
    """A paragraph as the page wraps it: lines of about 118 characters, never broken inside a `code span`."""
    kept = _CODE.sub(lambda span: span[0].replace(" ", "\0"), " ".join(text.split()))
    return textwrap.fill(kept, width=118, break_long_words=False, break_on_hyphens=False).replace("\0", " ")


def render(sections: Sequence[Section]) -> str:
    parts = ["# Settings", prose(HEADER)]
    for section in sections:
        parts.extend(part for part in (section.heading, prose(section.intro)) if part)
        if section.settings:
            parts.append(table(section.settings))
        if section.outro:
            parts.append(prose(section.outro))
    return "\n\n".join(parts) + "\n"


HEADER: Final = """
Every walfeed process is configured by environment variables, read once at start; a missing or invalid value stops
the process with the variable named (exit code 2). Command-line flags of the same name override them (`walfeed
--database-url ... api`). Each setting is declared once, in its process's settings module (variable, default,
bounds, meaning; docs/adr/0130-settings-declared-once.md), and this page is generated from those declarations:
`python -m services.cli.settings_doc > docs/settings.md`. `tests/unit/test_docs.py` fails when this page differs
from what that prints, or when the code reads a variable no declaration names."""

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
            "needs the `otel` extra (`pip install 'walfeed[otel]'`; the Docker image and `scripts/bootstrap.sh` "
            "install it). Without an endpoint nothing is traced or exported and OpenTelemetry is not even imported; "
            "the outbox rows still get their trace context and the log lines their `trace_id`.",
            tracing.SETTINGS),
    Section("## api (`walfeed api`)", "`services/api/config.py`, and the `api` command's flags.", api.SETTINGS),
    Section("", "Search (`GET /v1/search`, `services/api/search_config.py`; the model of its queries is the embedder's "
            "below, docs/search.md):", api.SEARCH_SETTINGS),
    Section("## relay (`walfeed relay`)", "`services/cdc_relay/config.py`.", relay.SETTINGS),
    Section("", "With `walfeed relay --source poll` (`services/cdc_relay/poll_policy.py`; window, metrics, shutdown "
            "and blocked timeouts are the relay's above):", relay.POLL_SETTINGS),
    Section("## worker (`walfeed worker`)",
            "`services/worker/config.py`: the consumer runtime's settings (`services/consumer/settings.py`) under the "
            "`WALFEED_WORKER_*` prefix.", worker.SETTINGS),
    Section("## notifier (`walfeed notifier`)",
            "`services/notifier/config.py`: the consumer runtime's settings under their own prefix, and the author "
            "budget (docs/notifications.md).", notifier.SETTINGS),
    Section("## delivery (`walfeed deliver --channel webhook|email`)",
            "`services/delivery/config.py`; what they mean for a delivery: docs/notifications.md. The two "
            "`WALFEED_WEBHOOK_*` settings are read by the api too, when a webhook is registered "
            "(`services/core/ssrf.py`).", delivery.SETTINGS),
    Section("## prune-notifications (`walfeed prune-notifications`)",
            "`services/cli/ops_args.py`, `services/cli/prune.py`.", (ops_args.RETENTION,)),
    Section("## bootstrap-roles (`walfeed bootstrap-roles`, `walfeed up`)",
            "`services/cli/roles.py`. Run with a Postgres superuser as `WALFEED_DATABASE_URL` and the broker's admin "
            "rights.", roles.SETTINGS, "`walfeed up` generates, for its run, any password not set."),
    Section("## embedder (`walfeed embedder`, `walfeed embed backfill`)",
            "`services/embedder/config.py` (docs/search.md, docs/adr/0124-embedder-best-effort-consumer.md).",
            embed.SETTINGS),
    Section("## embedding model (`services/core/embedding`: the api's queries, the embedder's posts)",
            "`services/core/embedding/config.py`: which embedder turns posts and queries into vectors (docs/search.md, "
            "docs/adr/0120-local-embedding-model.md). The api embeds search queries with it, the embedder and the "
            "backfill embed posts with it: give them the same values, or search finds no vectors of its model and "
            "answers from text (`model-incomplete`).", embedder.SETTINGS),
    Section("## Tests and benchmarks", "Read by the test harness, scripts and benchmarks, not by walfeed's processes.",
            _HARNESS),
)


def page() -> str:
    return render(SECTIONS)


def main() -> None:
    sys.stdout.write(page())


if __name__ == "__main__":
    main()
