"""Every process runs from what pyproject.toml declares: each third-party module services/ imports is provided by
the main dependencies (or, for the traces' lazily imported opentelemetry, the otel extra), and the Dockerfile
installs the main dependencies with at most the extras it names. scripts/check-packaging.sh imports every module
in a fresh virtualenv with `pip install .` and nothing else; this is the static half, for the image (no Docker
engine here)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from tests.unit.environment import ROOT

# A module only services/core/otel.py imports, when OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/adr/0072).
LAZY_EXTRA = {"opentelemetry": "otel"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(requirements: list[str]) -> set[str]:
    return {_normal(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) for r in requirements}


def _imported_top_levels() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "services").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m not in ("services", "__future__")}


def _project() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]  # type: ignore[no-any-return]


def test_every_third_party_module_the_services_import_is_a_declared_dependency() -> None:
    project = _project()
    main = _requirement_names(project["dependencies"])  # type: ignore[arg-type]
    extras: dict[str, list[str]] = project["optional-dependencies"]  # type: ignore[assignment]
    distributions = packages_distributions()
    missing = []
    for module in sorted(_imported_top_levels()):
        provided = {_normal(d) for d in distributions.get(module, [module])}
        wanted = _requirement_names(extras[LAZY_EXTRA[module]]) if module in LAZY_EXTRA else main
        if not provided & wanted:
            missing.append(f"{module} (from {sorted(provided)})")
    assert not missing, f"imported by services/ but not declared in pyproject's dependencies: {missing}"


def test_the_image_installs_the_main_dependencies_and_only_extras_that_exist() -> None:
    installs = [line for line in (ROOT / "Dockerfile").read_text().splitlines() if "pip install" in line]
    assert len(installs) == 1, installs
    match = re.search(r"""['"]?(-e\s+)?\.(\[(?P<extras>[\w,\s-]+)\])?['"]?\s*$""", installs[0])
    assert match, f"the image must install the project itself: {installs[0]}"
    extras = {e.strip() for e in (match["extras"] or "").split(",") if e.strip()}
    declared: dict[str, list[str]] = _project()["optional-dependencies"]  # type: ignore[assignment]
    assert extras <= set(declared) and "test" not in extras, extras  # runtime needs no test extra
    # what the processes import at run time is in the main dependencies (the test above), so any extras will do
