"""The figures a benchmark writes with `--json PATH`, and how run_all reads them back.

A figures file is a JSON object whose `figures` maps each figure's name to a number; whatever else a benchmark
adds (its settings, its runs) is for people. Reading is total: a missing or unreadable file, and a figure that is
absent or not a finite number, are named in `missing` rather than failing the report. Pure but for the file itself:
unit-tested in tests/unit/test_bench_figures.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def write(path: Path | None, figures: Mapping[str, float], **details: Any) -> None:
    """Writes `{"figures": ..., **details}` to `path` (nothing when it is None), creating its folder."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"figures": dict(figures), **details}, indent=2, default=str))


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def read(path: Path, expected: Iterable[str]) -> dict[str, Any]:
    """The numeric figures of a file `write` wrote, plus `missing`: the `expected` names it does not hold."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = None
    given = data.get("figures") if isinstance(data, dict) else None
    found: dict[str, Any] = {}
    if isinstance(given, dict):
        for name, value in given.items():
            number = _number(value)
            if isinstance(name, str) and number is not None:
                found[name] = number
    found["missing"] = [name for name in expected if name not in found]
    return found
