"""Where the api keeps saved copies of its index (WALFEED_SEARCH_INDEX_DIR, docs/adr/0121 "Costs"), decided
without I/O: one file per (model, database, poll position), `{model}.{database}.{xmin}.usearch`, named so that a
file is never rewritten (a process writes a temporary name and renames it), the newest position loaded at start. The
position is the poll window's lower end when the file was written: every row changed by a transaction below it is
in the file, and the polls from it read the rest (docs/adr/0122). A position means something in one database only:
`database` is the cluster's system identifier and the database's oid (search_sql.DATABASE), so that a database
created again, or restored into another cluster, never loads a file of the one before (its posts' vectors, and a
position its transaction counter may not reach for a long time). `model` is the model's id made safe for a file
name, with a digest of the id itself: ids that differ only in the characters made safe are different files."""

from __future__ import annotations

import hashlib
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


def stem(model: str, database: str) -> str:
    """The file name prefix of a model's index in a database (model ids hold `:` and `/`)."""
    digest = hashlib.sha256(model.encode()).hexdigest()[:8]
    return f"{_UNSAFE.sub('_', model)}-{digest}.{_UNSAFE.sub('_', database)}"


def name(model: str, database: str, xmin: int) -> str:
    return f"{stem(model, database)}.{xmin}{SUFFIX}"


def saved(model: str, database: str, names: list[str]) -> list[Saved]:
    """The model's saved files of `database` among `names`, newest position first (other files ignored)."""
    prefix = stem(model, database) + "."
    found = []
    for entry in names:
        middle = entry[len(prefix):-len(SUFFIX)] if entry.startswith(prefix) and entry.endswith(SUFFIX) else ""
        if middle.isdigit():
            found.append(Saved(entry, int(middle)))
    return sorted(found, key=lambda s: -s.xmin)


def stale(model: str, database: str, names: list[str]) -> list[str]:
    """The model's files of `database` to delete: all but the KEEP newest (another database's are left alone: the
    directory may be shared)."""
    return [s.name for s in saved(model, database, names)[KEEP:]]
