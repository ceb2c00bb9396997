"""Arguments of the operations commands: `walfeed dead ...` (dead.py) and `walfeed prune-outbox`
(prune.py). Kept apart from them so building the parser imports neither a broker nor a database client."""

from __future__ import annotations

import argparse
from typing import Final

from services.core.settings import Duration

SubParsers = argparse._SubParsersAction  # argparse's own type for `add_subparsers()`

# What prune-notifications' --older-than is without the flag: a month of history in the api's lists.
RETENTION: Final = Duration(
    "WALFEED_NOTIFICATION_RETENTION", "30d",
    "what `walfeed prune-notifications` keeps without `--older-than`: settled deliveries and read or withdrawn "
    "notifications older than this go (ADR 0100)")


def add_parsers(sub: SubParsers) -> None:  # type: ignore[type-arg]
    _dead(sub)
    prune = sub.add_parser("prune-outbox", help="delete outbox rows and processed-event records whose events were "
                           "confirmed at least --older-than ago, in small batches")
    prune.add_argument("--older-than", required=True, metavar="DURATION",
                       help="e.g. 7d, 12h, 30m; counted from the broker's confirm of each event")
    prune.add_argument("--wait", type=float, default=15.0,
                       metavar="SECONDS", help="wait this long for the slot to confirm a position recorded now "
                       "(default 15)")
    notifications = sub.add_parser("prune-notifications", help="delete delivered, dead and withdrawn deliveries and "
                                   "read or withdrawn notifications older than --older-than, in small batches")
    notifications.add_argument("--older-than", metavar="DURATION",
                               help=f"e.g. 30d, 12h (default: {RETENTION.name}, or {RETENTION.default})")


def _dead(sub: SubParsers) -> None:  # type: ignore[type-arg]
    dead = sub.add_parser("dead", help="dead letters: ls, show, replay, purge, export")
    commands = dead.add_subparsers(dest="dead_command", required=True, metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--queue", help="one dead queue (default: all), with or without the prefix")
    common.add_argument("--reason", help="reason contains this text (case-insensitive)")
    common.add_argument("--type", help="event type, wildcards allowed (post.*)")
    common.add_argument("--since", help="dead for at most this long (2h) or since this RFC 3339 time")
    common.add_argument("--limit", type=int, help="at most this many letters")
    commands.add_parser("ls", parents=[common], help="counts and oldest age by queue, reason and type")
    commands.add_parser("show", parents=[common], help="letters with their headers (default --limit 20)")
    replay = commands.add_parser("replay", parents=[common], help="publish back to the queue they came from "
                                 "(a dead delivery made PENDING again first)")
    replay.add_argument("--dry-run", action="store_true", help="say what would be replayed, change nothing")
    replay.add_argument("--rate", type=float, default=0.0, help="at most this many per second (default: no limit)")
    purge = commands.add_parser("purge", parents=[common], help="delete letters for good (asks first)")
    purge.add_argument("--yes", action="store_true", help="do not ask")
    export = commands.add_parser("export", parents=[common], help="write letters as JSON lines")
    export.add_argument("--output", "-o", default="-", help="file to write (default: standard output)")
