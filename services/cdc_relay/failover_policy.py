"""Is this the server the relay's checkpoint was recorded on, and what must happen before streaming? Pure.

A logical slot does not survive the promotion of a standby on Postgres 15: the new primary has no slot, or a slot
someone created there later (`walfeed migrate`), which has not seen the events committed before it. The checkpoint
(db/init/013_relay_checkpoint.sql) says which outbox rows the broker confirmed and on which server (system
identifier) and timeline; a promoted standby keeps the system identifier and starts a new timeline. docs/adr/0091.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Server:
    system_identifier: int
    timeline: int


@dataclass(frozen=True, slots=True)
class Checkpoint:
    server: Server | None  # None: the row exists, nothing checkpointed yet (a watermark is waiting)
    recovering: bool = False  # a recovery began (relay_checkpoints.recovering) and never finished: killed, maybe


class Action(enum.Enum):
    STREAM = "stream"  # the slot has seen everything the checkpoint does not cover
    MISSING = "missing"  # no slot and no checkpoint: nothing to recover from, `walfeed migrate` creates the slot
    CREATE = "create"  # no slot: create it, republish what the checkpoint does not cover, then stream
    REPUBLISH = "republish"  # a slot of unknown history (another server or timeline, or a recovery cut short)


def decide(server: Server, slot_exists: bool, checkpoint: Checkpoint | None) -> Action:
    if not slot_exists:
        # A slot dropped on the same server is recovered the same way as a new primary's missing slot; a row with
        # no checkpoint yet (a relay ran, the slot never passed its first watermark) republishes every CDC row.
        return Action.MISSING if checkpoint is None else Action.CREATE
    if checkpoint is not None and checkpoint.recovering:
        # The slot was created by a recovery that never finished: it has not seen the rows not republished yet,
        # though the checkpoint may match this server (a dropped slot) or hold nothing yet.
        return Action.REPUBLISH
    recorded = checkpoint.server if checkpoint is not None else None
    if recorded is None or recorded == server:
        return Action.STREAM
    return Action.REPUBLISH
