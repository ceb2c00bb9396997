"""Where the api keeps saved copies of its index (WALFEED_SEARCH_INDEX_DIR, docs/adr/0121 "Costs"), decided
without I/O: one file per (model, poll position), `{model}.{xmin}.usearch`, named so that a file is never
rewritten (a process writes a temporary name and renames it), the newest position loaded at start. The position
is the poll window's lower end when the file was written: every row changed by a transaction below it is in the
file, and the polls from it read the rest (docs/adr/0122)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

SUFFIX: Final = ".usearch"
KEEP: Final = 2  # files of a model kept: the newest and the one before (a process may still be reading it)
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True, slots=True)
class Saved:
    name: str
    xmin: int


def stem(model: str) -> str:
    """The model's id as a file name prefix (model ids hold `:` and `/`)."""
    return _UNSAFE.sub("_", model)


def name(model: str, xmin: int) -> str:
    return f"{stem(model)}.{xmin}{SUFFIX}"


def saved(model: str, names: list[str]) -> list[Saved]:
    """The model's saved files among `names`, newest position first (other files ignored)."""
    prefix = stem(model) + "."
    found = []
    for entry in names:
        middle = entry[len(prefix):-len(SUFFIX)] if entry.startswith(prefix) and entry.endswith(SUFFIX) else ""
        if middle.isdigit():
            found.append(Saved(entry, int(middle)))
    return sorted(found, key=lambda s: -s.xmin)


def stale(model: str, names: list[str]) -> list[str]:
    """The model's files to delete: all but the KEEP newest."""
    return [s.name for s in saved(model, names)[KEEP:]]
