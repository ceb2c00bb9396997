"""A fault schedule drawn from a seed, so a failing run can be replayed exactly. Pure."""

from __future__ import annotations

import random
from dataclasses import dataclass

# Every fault the suite knows, with how long it lasts (seconds) before the system is let recover.
FAULTS: dict[str, tuple[float, float]] = {
    "kill_relay": (0.0, 0.0),         # SIGKILL the active relay, restart it at once (the standby may win)
    "kill_worker": (0.0, 0.0),        # SIGKILL one worker, restart it
    "kill_api": (0.0, 0.0),           # SIGKILL the api, restart it
    "restart_broker": (0.0, 0.0),     # rabbitmqctl stop_app / start_app
    "memory_alarm": (2.0, 6.0),       # broker blocks publishers for a while
    "restart_postgres": (0.0, 0.0),   # pg_ctlcluster stop -m immediate, then start
    "kill_walsender": (0.0, 0.0),     # pg_terminate_backend of the slot's walsender
    "cut_relay_db": (0.0, 0.0),       # drop the relay's replication connection (TCP proxy)
    "cut_worker_amqp": (0.0, 0.0),    # drop the workers' broker connections (TCP proxy)
    "stall_relay_amqp": (1.0, 5.0),   # the relay's broker connection goes silent for a while
}


@dataclass(frozen=True)
class Fault:
    at: float      # seconds after the workload starts
    kind: str
    hold: float    # how long the fault lasts (0: instantaneous)
    target: int    # which instance, where there are several (worker index)


def make_schedule(seed: int, duration: float, count: int, kinds: tuple[str, ...] = tuple(FAULTS)) -> list[Fault]:
    """`count` faults spread over the first 80% of `duration` (the rest lets the last fault's effects show),
    never two at the same moment: each starts after the previous one ended plus a breathing gap."""
    unknown = set(kinds) - set(FAULTS)
    if unknown:
        raise ValueError(f"unknown fault kinds: {sorted(unknown)}")
    rng = random.Random(seed)
    window = duration * 0.8
    slot = window / max(count, 1)
    faults = []
    for i in range(count):
        kind = rng.choice(kinds)
        low, high = FAULTS[kind]
        hold = round(rng.uniform(low, high), 2) if high else 0.0
        at = round(i * slot + rng.uniform(0, max(0.0, slot - hold) * 0.5), 2)
        faults.append(Fault(at=at, kind=kind, hold=hold, target=rng.randrange(2)))
    return faults
