"""The reference in docs/ says what the code does: the API's operations, the settings, and every file and test
the pages name."""

from __future__ import annotations

import re

import pytest

from services.api.app import create_app
from services.api.config import ApiSettings
from services.cli import settings_doc
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


def test_settings_md_is_what_the_declarations_generate() -> None:
    """Defaults, bounds and meanings, not only names: the page is `python -m services.cli.settings_doc`'s output."""
    assert (DOCS / "settings.md").read_text() == settings_doc.page(), \
        "docs/settings.md is stale: python -m services.cli.settings_doc > docs/settings.md"


def test_each_variable_is_declared_once_per_section() -> None:
    for section in settings_doc.SECTIONS:
        names = [setting.name for setting in section.settings]
        assert len(names) == len(set(names)), section.heading


def test_the_processes_read_settings_only_through_their_declarations() -> None:
    """A variable read by name (`env.int("WALFEED_...")`, `os.environ.get("WALFEED_...")`) has no declaration: its
    default, bounds and meaning would be written again, and drift (ADR 0130)."""
    by_name = re.compile(r"""(?:env\.(?:int|float|str|bool|optional|secret)|os\.environ\.get|os\.getenv)\(\s*"""
                         r"""f?["'](?:WALFEED_|OTEL_|\{)""")
    found = [f"{path.relative_to(ROOT)}: {line.strip()}" for path in sorted((ROOT / "services").rglob("*.py"))
             if path.name != "settings.py" or path.parent.name != "core"
             for line in path.read_text().splitlines() if by_name.search(line)]
    assert found == []


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


ADRS = DOCS / "adr"
_STATUS = re.compile(r"Status: (?:accepted|superseded by \d{4}|amended by \d{4}(?:, \d{4})*)")


@pytest.mark.parametrize("adr", sorted(p.name for p in ADRS.glob("*.md")))
def test_every_adr_begins_with_its_status_and_names_only_records_that_exist(adr: str) -> None:
    status, blank, title = (ADRS / adr).read_text().split("\n", 3)[:3]
    assert _STATUS.fullmatch(status), f"{adr}: {status!r} is not `Status: accepted | superseded by N | amended by N`"
    assert blank == "" and title.startswith(f"# {adr[:4]}. "), f"{adr}: the title `# {adr[:4]}. ...` follows the status"
    for number in re.findall(r"\d{4}", status):
        assert number != adr[:4] and list(ADRS.glob(f"{number}-*.md")), f"{adr} names ADR {number}: no such record"


README = ROOT / "README.md"


def _section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_readme_fits_on_a_few_screens_and_every_figure_names_its_command() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 200, "measurements and their history belong in docs/results.md"
    rows = [r for r in _section(text, "How fast").splitlines() if r.startswith("| ") and not r.startswith("| what ")]
    assert rows
    for row in rows:
        command = row.rstrip(" |").rsplit("|", 1)[1]
        assert re.search(r"python -m (bench\.\w+|pytest tests/)", command), f"a figure without its command: {row}"


def test_the_readme_layout_names_every_package_of_services() -> None:
    layout = _section(README.read_text(), "Layout")
    packages = sorted(p.parent.name for p in (ROOT / "services").glob("*/__init__.py"))
    assert packages and [p for p in packages if f"services/{p}/" not in layout] == []


# Where walfeed's own code and docs name a ticket or a work session instead of saying what a thing is. Not scanned
# yet: docs/settings.md, rewritten in parallel (settings declared once); it joins the list when that lands.
_RUN_LOG = re.compile(r"\b(?:[Ii]ssues? #?\d+|[Ss]essions? \d+|[Ss]top \d+)\b")
_SCANNED = ["README.md", "docs", "bench", "testkit", "tests", "services/api", "services/cdc_relay", "services/cli",
            "services/core", "services/core/embedding", "services/consumer", "services/worker", "services/notifier",
            "services/delivery"]


def test_no_issue_numbers_or_run_log_headings_in_code_or_docs() -> None:
    files = [f for p in _SCANNED for f in ([ROOT / p] if (ROOT / p).is_file() else (ROOT / p).rglob("*"))
             if f.suffix in (".py", ".md") and f.name != "settings.md"]
    found = [f"{f.relative_to(ROOT)}: {m.group(0)}" for f in files for m in _RUN_LOG.finditer(f.read_text())]
    assert files and found == []
