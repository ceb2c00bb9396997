"""Which part of the repository may import which: the dependencies run one way.

services/ imports nothing of the tests, the benchmarks or their fixtures. The fixtures that tests and benchmarks
share (testkit/) import services only: tests/ and bench/ both import them, never the other way round.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
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
