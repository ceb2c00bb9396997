"""The reference in docs/ says what the code does: the API's operations, the settings, and every file and test
the pages name."""

from __future__ import annotations

import re

import pytest

from services.api.app import create_app
from services.api.config import ApiSettings
from services.core.settings import Settings
from tests.unit.environment import ROOT, variables_read

DOCS = ROOT / "docs"
_OPERATION_ROW = re.compile(r"^\| `(GET|POST|PUT|PATCH|DELETE) (/\S*)` \|", re.MULTILINE)
_VARIABLE = re.compile(r"`(WALFEED_[A-Z0-9_]+)`")
# A repository path, optionally with a test in it: `tests/unit/test_docs.py::test_...`.
_PATH = re.compile(r"(?<![\w/.])((?:services|tests|testkit|db|bench|scripts|ops|deploy|docs)/[\w./-]*\w)(?:::(\w+))?")
_MODULE_RUN = re.compile(r"python -m ((?:bench|services)(?:\.\w+)+)")


def test_api_md_lists_exactly_the_operations_the_app_serves() -> None:
    served = {(method.upper(), path) for path, operations in
              create_app(Settings.from_env({}), ApiSettings()).openapi()["paths"].items() for method in operations}
    documented = set(_OPERATION_ROW.findall((DOCS / "api.md").read_text()))
    assert documented == served, f"missing: {served - documented}, not served: {documented - served}"


def _process_settings_section() -> str:
    return (DOCS / "settings.md").read_text().split("## Tests and benchmarks")[0]


def test_settings_md_lists_exactly_the_variables_the_processes_read() -> None:
    read, documented = variables_read(), set(_VARIABLE.findall(_process_settings_section()))
    assert documented == read, f"missing: {read - documented}, not read: {documented - read}"


@pytest.mark.parametrize("module", ["services/api/config.py", "services/cdc_relay/config.py",
                                    "services/cdc_relay/poll_policy.py", "services/worker/config.py",
                                    "services/notifier/config.py", "services/delivery/config.py",
                                    "services/embedding/config.py", "services/api/search_config.py",
                                    "services/embedder/config.py"])
def test_the_docstring_tables_are_in_settings_md(module: str) -> None:
    table = {line.split("`")[1] for line in (ROOT / module).read_text().splitlines() if line.startswith("| `WALFEED_")}
    assert table and table <= set(_VARIABLE.findall(_process_settings_section()))


@pytest.mark.parametrize("page", [*sorted(p.name for p in DOCS.glob("*.md")), "../README.md"])
def test_every_file_and_test_a_page_names_exists(page: str) -> None:
    for path, test in _PATH.findall((DOCS / page).read_text()):
        if path.startswith("bench/results"):
            continue  # written by a benchmark run
        assert (ROOT / path).exists(), f"{page} names {path}"
        if test:
            assert re.search(rf"^(async )?def {test}\(", (ROOT / path).read_text(), re.MULTILINE), f"{page}: {test}"


@pytest.mark.parametrize("page", [*sorted(p.name for p in DOCS.glob("*.md")), "../README.md"])
def test_every_module_a_page_runs_exists(page: str) -> None:
    for module in _MODULE_RUN.findall((DOCS / page).read_text()):
        assert (ROOT / (module.replace(".", "/") + ".py")).exists(), f"{page} runs python -m {module}"
