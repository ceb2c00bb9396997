"""The `walfeed` console script: parses the command line, builds settings, hands off to one process's entrypoint.

Subcommand modules are imported lazily so `walfeed relay` never imports FastAPI and `walfeed api` never imports
psycopg2.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from services.api import config as api_config  # declarations only: imports no web framework
from services.core import logs
from services.core.settings import Settings, SettingsError

log = logging.getLogger("walfeed")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="walfeed", description="walfeed: news feed on an outbox + CDC pipeline")
    parser.add_argument("--database-url", help="overrides WALFEED_DATABASE_URL")
    parser.add_argument("--amqp-url", help="overrides WALFEED_AMQP_URL")
    parser.add_argument("--amqp-prefix", help="overrides WALFEED_AMQP_PREFIX")
    parser.add_argument("--slot", help="overrides WALFEED_SLOT")
    parser.add_argument("--celebrity-threshold", help="overrides WALFEED_CELEBRITY_THRESHOLD")
    parser.add_argument("--log-level", help="overrides WALFEED_LOG_LEVEL")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    api = sub.add_parser("api", help="serve the HTTP API")
    api.add_argument("--host", help="overrides WALFEED_API_HOST")
    api.add_argument("--port", type=int, help="overrides WALFEED_API_PORT")
    api.add_argument("--workers", type=int, dest="api_workers", help="server processes; overrides WALFEED_API_WORKERS")

    relay = sub.add_parser("relay", help="the CDC relay daemon: logical slot -> RabbitMQ")
    relay.add_argument("--source", choices=["cdc", "poll"], default="cdc", help="where events come from")

    sub.add_parser("worker", help="the fan-out consumer")
    sub.add_parser("notifier", help="the notification consumer: follows and mentions -> notifications, deliveries")
    deliver = sub.add_parser("deliver", help="the notification delivery worker of one channel")
    deliver.add_argument("--channel", choices=["webhook", "email"], required=True, help="what it delivers to")
    roles = sub.add_parser("bootstrap-roles", help="least privilege: database and broker roles per process, schema "
                           "owned by the owner role, grants; needs Postgres superuser and broker admin rights")
    roles.add_argument("--no-slot", action="store_true", help="no replication slot (relay --source poll)")
    migrate = sub.add_parser("migrate", help="apply db/init/*.sql and create the replication slot; safe to run twice")
    migrate.add_argument("--no-slot", action="store_true",
                         help="schema only, for databases without logical replication (relay --source poll)")

    up = sub.add_parser("up", help="local development: infrastructure checks, bootstrap-roles, api + relay + worker + "
                        "notifier each under its own role")
    up.add_argument("--host", default=api_config.HOST.default, help="where the api listens")
    up.add_argument("--port", type=int, default=api_config.PORT.default_value())
    up.add_argument("--workers", type=int, default=1, help="worker processes to start")

    sub.add_parser("embedder", help="the embedding consumer: post vectors for semantic search, best effort")
    embed = sub.add_parser("embed", help="post vectors for semantic search")
    embed_what = embed.add_subparsers(dest="embed_command", required=True, metavar="ACTION")
    backfill = embed_what.add_parser("backfill", help="a vector for every live post without one, online, resumable")
    backfill.add_argument("--model", help="overrides WALFEED_EMBEDDER_MODEL: fill this model's vectors (for ollama "
                          "or openai) before search switches to it")
    backfill.add_argument("--batch-size", type=int, help="posts per batch; overrides WALFEED_EMBED_BATCH_SIZE")
    backfill.add_argument("--from-start", action="store_true", help="look at every post again, not only those "
                          "above the model's position")

    status = sub.add_parser("status", help="slot lag, queue depths, dead letters")
    status.add_argument("--json", action="store_true", help="machine-readable output")

    # Operations: dead letters and retention. Logic in services/cli/dead*.py and prune.py.
    from services.cli import ops_args  # argument definitions only: imports no broker or database client

    ops_args.add_parsers(sub)
    _rebuild_parser(sub)
    return parser


# --- walfeed rebuild timelines (docs/adr/0073) ---
def _rebuild_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rebuild = sub.add_parser("rebuild", help="recompute projections from the source tables, online")
    what = rebuild.add_subparsers(dest="projection", required=True, metavar="PROJECTION")
    timelines = what.add_parser("timelines", help="compare home timelines with posts + follows and repair them")
    who = timelines.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", type=int, action="extend", nargs="+", default=[], metavar="ID", help="these users")
    who.add_argument("--all", action="store_true", dest="all_users", help="every user, in id order")
    timelines.add_argument("--after", type=int, default=0, metavar="ID", help="with --all: resume after this user")
    timelines.add_argument("--check", action="store_true", help="report users whose timelines differ; write nothing")
    timelines.add_argument("--batch-size", type=int, default=100, help="users per batch (default 100)")
    timelines.add_argument("--settle", type=float, default=5.0, metavar="SECONDS",
                           help="--check reads differing users again after this long and reports what both reads "
                           "show (default 5; 0: one read)")


def _run_rebuild(args: argparse.Namespace, settings: Settings) -> int:
    import psycopg

    from services.cli import rebuild

    try:
        return rebuild.run(settings, users=args.user, all_users=args.all_users, after=args.after, check=args.check,
                           batch_size=args.batch_size, settle=args.settle)
    except rebuild.RebuildError as exc:
        print(f"walfeed rebuild: {exc}", file=sys.stderr)
        return 2
    except psycopg.Error as exc:  # unreachable, refused, or deadlocked past its retries: nothing half-done is kept
        print(f"walfeed rebuild: the database failed: {str(exc).strip()[:500]}", file=sys.stderr)
        return 1
# --- end walfeed rebuild ---


_OVERRIDES = {
    "database_url": "WALFEED_DATABASE_URL",
    "amqp_url": "WALFEED_AMQP_URL",
    "amqp_prefix": "WALFEED_AMQP_PREFIX",
    "slot": "WALFEED_SLOT",
    "celebrity_threshold": "WALFEED_CELEBRITY_THRESHOLD",
    "api_workers": "WALFEED_API_WORKERS",  # `api --workers` (`up --workers` counts worker processes)
    "log_level": "WALFEED_LOG_LEVEL",
    "model": "WALFEED_EMBEDDER_MODEL",  # `embed backfill --model`
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # Flags override the environment; child processes (walfeed up) inherit the result.
    for attr, var in _OVERRIDES.items():
        value = getattr(args, attr, None)  # None also for a flag the chosen command does not have
        if value is not None:
            os.environ[var] = str(value)
    try:
        logs.configure(args.command, logs.log_level(), logs.log_format())
        settings = Settings.from_env()
        return _dispatch(args, settings)
    except SettingsError as exc:
        print(f"walfeed {args.command}: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "api":
        from services.api import main as api_main

        return api_main.run(settings, host=args.host, port=args.port)
    if args.command == "relay":
        from services.cdc_relay import main as relay_main

        return relay_main.run(settings, source=args.source)
    if args.command == "worker":
        from services.worker import main as worker_main

        return worker_main.run(settings)
    if args.command == "notifier":
        from services.notifier import main as notifier_main

        return notifier_main.run(settings)
    if args.command == "deliver":
        from services.delivery import main as deliver_main

        return deliver_main.run(settings, channel=args.channel)
    if args.command == "migrate":
        from services.cli import migrate

        return migrate.run(settings, slot=not args.no_slot)
    if args.command == "bootstrap-roles":
        from services.cli import bootstrap

        return bootstrap.run(settings, slot=not args.no_slot)
    if args.command == "up":
        from services.cli import up

        return up.run(settings, host=args.host, port=args.port, workers=args.workers)
    if args.command == "status":
        from services.cli import status

        return status.run(settings, as_json=args.json)
    if args.command == "dead":
        from services.cli import dead

        return dead.run(settings, args)
    if args.command == "prune-outbox":
        from services.cli import prune

        return prune.run(settings, args)
    if args.command == "prune-notifications":
        from services.cli import prune

        return prune.run_notifications(settings, args)
    if args.command == "embedder":
        from services.embedder import main as embedder_main

        return embedder_main.run(settings)
    if args.command == "embed":
        from services.embedder import main as embedder_main

        return embedder_main.run_backfill(settings, from_start=args.from_start, batch_size=args.batch_size)
    if args.command == "rebuild":
        return _run_rebuild(args, settings)
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
