"""Which part of the repository may import which: the dependencies run one way.

services/ imports nothing of the tests, the benchmarks or their fixtures. The fixtures that tests and benchmarks
share (testkit/) import services only: tests/ and bench/ both import them, never the other way round.

No service imports another (ADR 0001, 0125). A service is a process: a package of services/ with a `main.py` (the
api, the relay, the fan-out worker, the notifier, the delivery workers). A package without one is a library the
services share (services/core, the consumer runtime services/consumer, services/core/embedding), and imports no
service. What two services share lives in a library. The command line (services/cli) is the operator's tool and
the one place that starts the processes: it may import each service's `main` (lazily, to start it), its `config`
(the declarations of its settings, from which services/cli/settings_doc.py writes docs/settings.md) and the
libraries, nothing else of a service.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from tests.unit.environment import ROOT

SHARED_FIXTURES = "testkit"


def imported(path: Path) -> Iterator[str]:
    """Every module `path` imports (absolute imports; the repository uses no relative ones)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module


def offending(folder: str, forbidden: set[str], allowed: str = "") -> list[str]:
    return sorted(f"{path.relative_to(ROOT)} imports {module}" for path in (ROOT / folder).rglob("*.py")
                  for module in imported(path)
                  if module.split(".")[0] in forbidden and not (allowed and module.startswith(allowed)))


@pytest.mark.parametrize(("folder", "forbidden", "allowed"), [
    ("services", {"tests", "bench", SHARED_FIXTURES.split(".")[0]}, ""),
    ("testkit", {"tests", "bench"}, SHARED_FIXTURES),  # its own modules
    ("bench", {"tests"}, SHARED_FIXTURES),
])
def test_imports_run_one_way(folder: str, forbidden: set[str], allowed: str) -> None:
    assert offending(folder, forbidden, allowed) == []


SERVICES_DIR = ROOT / "services"
CLI = "cli"


def packages() -> tuple[set[str], set[str]]:
    """The services (packages with a main.py) and the libraries (the other packages but cli) of services/."""
    found = {p.name for p in SERVICES_DIR.iterdir() if (p / "__init__.py").exists()}
    services = {name for name in found if (SERVICES_DIR / name / "main.py").exists()}
    return services, found - services - {CLI}


def crossings(services: set[str], sources: Iterable[tuple[str, Iterable[str]]]) -> list[str]:
    """Every import of a service (or of cli) by another package of services/, but cli's of a service's `main` or
    `config`. `sources`: each file's path under services/ and the modules it imports."""
    out = []
    for name, modules in sources:
        own = name.split("/")[0]
        for module in modules:
            parts = module.split(".")
            if parts[0] != "services" or len(parts) < 2 or parts[1] == own:
                continue
            if own == CLI and parts[1] in services and parts[2:3] in (["main"], ["config"]):
                continue
            if parts[1] in services or parts[1] == CLI:
                out.append(f"{name} imports {module}")
    return sorted(out)


def imported_names(path: Path) -> Iterator[str]:
    """Every module or name `path` imports, in full (`from a import b` is `a.b`: b may be a module)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def test_no_service_imports_another_and_no_library_imports_a_service() -> None:
    services, libraries = packages()
    assert {"api", "cdc_relay", "worker", "notifier", "delivery"} <= services
    assert {"core", "consumer"} <= libraries
    files = SERVICES_DIR.rglob("*.py")
    assert crossings(services, ((str(f.relative_to(SERVICES_DIR)), list(imported_names(f))) for f in files)) == []


def test_the_crossing_check_finds_each_kind_of_crossing() -> None:
    sources = [
        ("notifier/effects.py", ["services.worker.decide", "services.consumer.outbox", "services.notifier.sql"]),
        ("core/x.py", ["services.delivery.webhook", "services.core.events", "pika"]),
        ("cli/__init__.py", ["services.worker.main", "services.worker.main.run", "services.delivery.route",
                             "services.core.logs", "services.delivery.config.SETTINGS"]),
        ("api/app.py", ["services.cli.status", "services.core.embedding.config"]),
    ]
    assert crossings({"worker", "delivery", "notifier", "api"}, sources) == [
        "api/app.py imports services.cli.status", "cli/__init__.py imports services.delivery.route",
        "core/x.py imports services.delivery.webhook", "notifier/effects.py imports services.worker.decide"]
