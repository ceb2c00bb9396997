"""CPU time from /proc (Linux): of one process, of processes by command name, and of the whole machine.

A process's CPU is utime + stime of /proc/<pid>/stat (all its threads). Per-process snapshots are compared pid by
pid (`spent`): a process that started between two snapshots counts from zero, one that exited is dropped (its
CPU since the first snapshot is lost), so processes coming and going never make a group's CPU negative.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path

from testkit.processes import children_of

TICK = os.sysconf("SC_CLK_TCK")

Processes = dict[int, tuple[str, float]]  # pid -> (label, CPU seconds)


def _stat(path: str | Path) -> tuple[str, float] | None:
    """(command name, utime + stime in seconds) of one /proc/<pid>/stat, None when the process is gone."""
    try:
        with open(path) as f:
            head, rest = f.read().rsplit(")", 1)
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = rest.split()
    return head.split("(", 1)[1], (int(fields[11]) + int(fields[12])) / TICK


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process (all its threads), None when it is gone."""
    stat = _stat(f"/proc/{pid}/stat")
    return None if stat is None else stat[1]


def by_name(names: Collection[str]) -> Processes:
    """pid -> (command name, CPU seconds) of every process whose name (/proc/<pid>/comm) is in `names`."""
    found: Processes = {}
    for path in Path("/proc").glob("[0-9]*/stat"):
        stat = _stat(path)
        if stat is not None and stat[0] in names:
            found[int(path.parent.name)] = stat
    return found


def tree(pid: int, label: str) -> Processes:
    """pid -> (label, CPU seconds) of a process and all its descendants (an api and its worker processes)."""
    found: Processes = {}
    pending = [pid]
    while pending:
        current = pending.pop()
        seconds = cpu_seconds(current)
        if seconds is not None:  # else it exited meanwhile
            found[current] = (label, seconds)
            pending += children_of(current)
    return found


def spent(before: Mapping[int, tuple[str, float]], after: Mapping[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds per label between two snapshots, pid by pid: a pid absent from `before` (or reused by another
    process: another label, less CPU) counts from zero; a pid absent from `after` is dropped."""
    out: dict[str, float] = {}
    for pid, (label, now) in after.items():
        then = before.get(pid)
        start = then[1] if then is not None and then[0] == label and then[1] <= now else 0.0
        out[label] = out.get(label, 0.0) + now - start
    return out


def machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs since boot, from /proc/stat: busy is all but idle and iowait. Only
    the first 8 fields (user nice system idle iowait irq softirq steal): guest and guest_nice are already part of
    user and nice."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return sum(values) - values[3] - values[4], sum(values)


def cores_busy(before: tuple[int, int], after: tuple[int, int]) -> float:
    """Mean number of busy cores between two `machine_ticks()` readings."""
    return (after[0] - before[0]) / max(1, after[1] - before[1]) * (os.cpu_count() or 1)
