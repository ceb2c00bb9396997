"""CPU of one measured run, in cores (CPU seconds per second of wall time): of the load generator, of the api under
test, of the bench database's backends and of the whole machine.

The load generator is this process and, apart, its children (pgbench), over the whole run: RUSAGE_CHILDREN counts
a child once it has been waited for, at the end of the run. The api (its process tree, compared pid by pid:
proc.spent), the database's backends (dbload) and the machine are read at the two ends of a window: the whole run,
or, given `window`, two instants inside it, read by a thread while the run goes on. A backend's CPU can only be
read while it lives, and pgbench opens its connections after the start and closes them at the end: its backends
need an inner window.
"""

from __future__ import annotations

import resource
import threading
import time
from dataclasses import dataclass

import psycopg

from bench.lib import dbload, infra, proc


@dataclass(frozen=True)
class _Reading:
    at: float
    api: proc.Processes
    machine: tuple[int, int]
    db: dbload.Snapshot | None


def _own_cpu() -> tuple[float, float]:
    """CPU seconds of this process and of its waited-for children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


class CpuMeter:
    """`with CpuMeter(api_pid) as cpu: <run>`, then, in cores: `cpu.loadgen` (this process), `cpu.children` (its
    children: pgbench), `cpu.api` (the api process and its workers), `cpu.busy` (the machine) and, given `dbname`,
    `cpu.db` (the backends connected to that database). `window` = (from, to): seconds after the start between
    which the api, the machine and the database are read (the run must last until `to`); None: the whole run."""

    def __init__(self, api_pid: int, dbname: str | None = None, window: tuple[float, float] | None = None) -> None:
        self.api_pid, self.dbname, self.window = api_pid, dbname, window
        self.loadgen = self.children = self.api = self.busy = self.db = 0.0

    def _read(self) -> _Reading:
        db = dbload.take(self._admin, self.dbname) if self._admin is not None and self.dbname else None
        return _Reading(time.perf_counter(), proc.tree(self.api_pid, "api"), proc.machine_ticks(), db)

    def _read_at(self, instants: tuple[float, float]) -> None:
        for at in instants:
            time.sleep(max(0.0, self._started + at - time.perf_counter()))  # sampling instants, not a test wait
            self._readings.append(self._read())

    def __enter__(self) -> CpuMeter:
        self._admin: psycopg.Connection[tuple[object, ...]] | None = infra.admin() if self.dbname else None
        self._readings: list[_Reading] = []
        self._started, self._before = time.perf_counter(), _own_cpu()
        self._sampler: threading.Thread | None = None
        if self.window is None:
            self._readings.append(self._read())
        else:
            self._sampler = threading.Thread(target=self._read_at, args=(self.window,), daemon=True)
            self._sampler.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        try:
            if exc_type is None:
                self._measure()
        finally:
            if self._admin is not None:
                self._admin.close()

    def _measure(self) -> None:
        wall = time.perf_counter() - self._started
        (own, children), (own0, children0) = _own_cpu(), self._before
        self.loadgen, self.children = (own - own0) / wall, (children - children0) / wall
        if self._sampler is None:
            self._readings.append(self._read())
        else:
            self._sampler.join()
        if len(self._readings) != 2:
            raise RuntimeError("the CPU sampler did not take its two readings (its traceback is above)")
        first, last = self._readings
        # pid by pid: an api worker restarted in between counts from zero, not as a jump of the total
        self.api = proc.spent(first.api, last.api).get("api", 0.0) / (last.at - first.at)
        self.busy = proc.cores_busy(first.machine, last.machine)
        if first.db is not None and last.db is not None:
            self.db = dbload.delta(first.db, last.db, ())["backend_cpu_s_per_s"]
