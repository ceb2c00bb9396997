"""`walfeed prune-outbox --older-than DURATION`: outbox rows and processed-event records whose events the broker
confirmed at least that long ago (docs/adr/0071; the statements are services/core/retention.py's).
`walfeed prune-notifications [--older-than DURATION]`: settled deliveries and read or withdrawn notifications
(ADR 0100)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

import psycopg

from services.cli.ops_args import RETENTION
from services.core import durations, retention
from services.core.settings import Env, Settings, SettingsError

T = TypeVar("T")


def _pruning(settings: Settings, command: str, migration: str,
             work: Callable[[retention.Conn, Callable[[], bool]], T]) -> tuple[T | None, int]:
    """`work` on a connection, stopped between two batches by SIGTERM: its result and the exit code (130 when
    stopped), or None and the code of a database error, printed."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())  # finish the batch, then stop
    try:
        with retention.connect(settings.database_url) as conn:
            result = work(conn, stop.is_set)
    except psycopg.errors.UndefinedFunction:
        print(f"walfeed {command}: the database has no retention functions yet: run `walfeed migrate` "
              f"({migration})", file=sys.stderr)
        return None, 1
    except psycopg.Error as exc:
        print(f"walfeed {command}: database error: {str(exc).strip()}", file=sys.stderr)
        return None, 1
    return result, 130 if stop.is_set() else 0


def run(settings: Settings, args: argparse.Namespace) -> int:
    try:
        older_than = durations.parse(args.older_than)
    except durations.DurationError as exc:
        print(f"walfeed prune-outbox: --older-than: {exc}", file=sys.stderr)
        return 2
    if args.wait < 0:
        print(f"walfeed prune-outbox: --wait {args.wait} must be 0 or more", file=sys.stderr)
        return 2
    pruned, code = _pruning(settings, "prune-outbox", "db/init/009_retention.sql", lambda conn, stopped: (
        retention.prune(conn, settings.slot, older_than, wait=args.wait, should_stop=stopped)))
    if pruned is not None:
        print(f"outbox: {pruned.confirmed} rows confirmed through the slot and {pruned.published} published by the "
              f"poller deleted; processed_events: {pruned.processed} records deleted")
        if pruned.note:
            print(f"note: {pruned.note}")
    return code


def run_notifications(settings: Settings, args: argparse.Namespace) -> int:
    try:
        older_than = durations.parse(args.older_than) if args.older_than else RETENTION.read(Env())
    except durations.DurationError as exc:
        print(f"walfeed prune-notifications: --older-than: {exc}", file=sys.stderr)
        return 2
    except SettingsError as exc:  # names the variable
        print(f"walfeed prune-notifications: {exc}", file=sys.stderr)
        return 2
    pruned, code = _pruning(settings, "prune-notifications", "db/init/015_delivery_budgets.sql",
                            lambda conn, stopped: retention.prune_notifications(conn, older_than,
                                                                                should_stop=stopped))
    if pruned is not None:
        print(f"deliveries: {pruned.deliveries} deleted; notifications: {pruned.notifications} deleted")
    return code
