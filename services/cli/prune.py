"""`walfeed prune-outbox --older-than DURATION`: outbox rows and processed-event records whose events the broker
confirmed at least that long ago (docs/adr/0071; the statements are services/core/retention.py's)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

import psycopg

from services.core import durations, retention
from services.core.settings import Settings


def run(settings: Settings, args: argparse.Namespace) -> int:
    try:
        older_than = durations.parse(args.older_than)
    except durations.DurationError as exc:
        print(f"walfeed prune-outbox: --older-than: {exc}", file=sys.stderr)
        return 2
    if args.wait < 0:
        print(f"walfeed prune-outbox: --wait {args.wait} must be 0 or more", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())  # finish the batch, then stop
    try:
        with retention.connect(settings.database_url) as conn:
            pruned = retention.prune(conn, settings.slot, older_than, wait=args.wait, should_stop=stop.is_set)
    except psycopg.errors.UndefinedFunction:
        print("walfeed prune-outbox: the database has no retention functions yet: run `walfeed migrate` "
              "(db/init/009_retention.sql)", file=sys.stderr)
        return 1
    except psycopg.Error as exc:
        print(f"walfeed prune-outbox: database error: {str(exc).strip()}", file=sys.stderr)
        return 1
    print(f"outbox: {pruned.confirmed} rows confirmed through the slot and {pruned.published} published by the "
          f"poller deleted; processed_events: {pruned.processed} records deleted")
    if pruned.note:
        print(f"note: {pruned.note}")
    return 130 if stop.is_set() else 0
