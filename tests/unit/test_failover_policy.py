"""failover_policy.decide: what the relay does before streaming, from the server, the slot and the checkpoint."""

from __future__ import annotations

from services.cdc_relay.failover_policy import Action, Checkpoint, Server, decide

PRIMARY = Server(7714258066233526379, 1)
PROMOTED = Server(7714258066233526379, 2)  # a promoted standby: same system identifier, next timeline
OTHER = Server(1234, 1)  # another cluster (restored from a dump, say)


def test_a_slot_on_the_checkpoints_server_streams() -> None:
    assert decide(PRIMARY, True, Checkpoint(PRIMARY)) is Action.STREAM


def test_a_slot_without_a_checkpoint_streams_as_before() -> None:
    assert decide(PRIMARY, True, None) is Action.STREAM
    assert decide(PRIMARY, True, Checkpoint(None)) is Action.STREAM


def test_no_slot_and_no_checkpoint_is_the_missing_slot_error_of_old() -> None:
    assert decide(PRIMARY, False, None) is Action.MISSING


def test_no_slot_with_a_checkpoint_creates_it_and_republishes() -> None:
    assert decide(PROMOTED, False, Checkpoint(PRIMARY)) is Action.CREATE
    assert decide(PRIMARY, False, Checkpoint(PRIMARY)) is Action.CREATE  # a dropped slot
    assert decide(PRIMARY, False, Checkpoint(None)) is Action.CREATE  # a relay ran, nothing checkpointed yet


def test_a_slot_of_unknown_history_on_another_timeline_or_server_is_republished_first() -> None:
    assert decide(PROMOTED, True, Checkpoint(PRIMARY)) is Action.REPUBLISH
    assert decide(OTHER, True, Checkpoint(PRIMARY)) is Action.REPUBLISH


def test_a_slot_left_by_a_recovery_cut_short_is_republished_first() -> None:
    # Killed after creating the slot, before republishing all: the slot has not seen those rows.
    assert decide(PRIMARY, True, Checkpoint(PRIMARY, recovering=True)) is Action.REPUBLISH  # a dropped slot
    assert decide(PRIMARY, True, Checkpoint(None, recovering=True)) is Action.REPUBLISH  # nothing checkpointed yet
    assert decide(PROMOTED, True, Checkpoint(PRIMARY, recovering=True)) is Action.REPUBLISH
    assert decide(PRIMARY, False, Checkpoint(PRIMARY, recovering=True)) is Action.CREATE  # dropped again since
