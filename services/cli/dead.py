"""`walfeed dead ls|show|replay|purge|export`: the dead letters of every dead queue walfeed declares
(docs/operations.md, docs/adr/0070). Selection and formats are dead_letters.py's, the broker is dead_broker.py's.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import IO, Final

from pika.exceptions import AMQPError

from services.cli import dead_deliveries as dd
from services.cli import dead_letters as dl
from services.cli.dead_broker import BrokerError, DeadBroker, Held, NotReadable
from services.cli.dead_rows import DeliveryRows
from services.core.settings import Settings
from services.core.topology import DeadLetterQueue, Topology

SHOW_LIMIT: Final = 20  # `show` without --limit: a screenful, not 100,000 letters
PROGRESS_EVERY: Final = 1000


def run(settings: Settings, args: argparse.Namespace) -> int:
    logging.getLogger("pika").setLevel(logging.CRITICAL)  # a missing queue is reported below, not as a warning
    now = datetime.now(UTC)
    try:
        queues = dl.resolve(Topology(settings.amqp_prefix).dead_letter_queues(), args.queue, settings.amqp_prefix)
        selection = dl.Filter(args.reason, args.type, dl.since(args.since, now))
        if args.limit is not None and args.limit < 1:
            raise dl.SelectionError(f"--limit {args.limit} must be at least 1")
        if getattr(args, "rate", 0.0) < 0:
            raise dl.SelectionError(f"--rate {args.rate} must be 0 (no limit) or more")
    except dl.SelectionError as exc:
        print(f"walfeed dead {args.dead_command}: {exc}", file=sys.stderr)
        return 2
    limit = args.limit if args.limit is not None else (SHOW_LIMIT if args.dead_command == "show" else None)
    try:
        broker = DeadBroker(settings.amqp_url)
    except BrokerError as exc:
        print(f"walfeed dead {args.dead_command}: {exc}", file=sys.stderr)
        return 1
    try:
        session = _Session(broker, queues, selection, limit, now, settings.database_url)
        code = _COMMANDS[args.dead_command](session, args)
        # The queue asked for and not readable is not "no dead letters"; among all of them, a warning is enough (each
        # consumer's broker user reads its own dead queue only, docs/operations.md).
        return code or (1 if session.unreadable and args.queue else 0)
    except (BrokerError, AMQPError) as exc:  # AMQPError: the connection lost midway; held letters are back
        print(f"walfeed dead {args.dead_command}: {exc!r}" if isinstance(exc, AMQPError) else
              f"walfeed dead {args.dead_command}: {exc}", file=sys.stderr)
        return 1
    finally:
        broker.close()


class _Session:
    """The queues and selection of one command, and the letters it holds."""

    def __init__(self, broker: DeadBroker, queues: list[DeadLetterQueue], selection: dl.Filter, limit: int | None,
                 now: datetime, database_url: str) -> None:
        self.broker, self.queues, self.selection, self.limit, self.now = broker, queues, selection, limit, now
        self.database_url = database_url  # replaying a delivery channel's letters only
        self.selected = 0
        self.unreadable = 0  # queues this broker user may not read

    @contextmanager
    def held(self) -> Iterator[list[tuple[Held, list[dl.Letter]]]]:
        """Each declared queue's letters held, with those selected (the limit counts across queues); every
        letter not removed goes back to its queue on the way out, whatever happens."""
        holds: list[tuple[Held, list[dl.Letter]]] = []
        try:
            for queue in self.queues:
                want = None if self.limit is None else self.limit - self.selected
                try:
                    held = self.broker.hold(queue, self.selection.matches, want)
                except NotReadable as exc:  # e.g. the fan-out worker's user on a delivery channel's dead queue
                    print(f"{exc}: run `walfeed dead` with its consumer's broker user (docs/operations.md)",
                          file=sys.stderr)
                    self.unreadable += 1
                    continue
                if held is None:
                    print(f"{queue.name}: not declared yet (its consumer never started)", file=sys.stderr)
                    continue
                chosen = [letter for letter in held.letters if self.selection.matches(letter)]
                if self.limit is not None:
                    chosen = chosen[: self.limit - self.selected]
                self.selected += len(chosen)
                holds.append((held, chosen))
            yield holds
        finally:
            for held, _ in holds:
                held.release()


def _all(holds: list[tuple[Held, list[dl.Letter]]]) -> list[dl.Letter]:
    return [letter for _, chosen in holds for letter in chosen]


def _ls(session: _Session, _args: argparse.Namespace) -> int:
    with session.held() as holds:
        print(dl.render_groups(dl.groups(_all(holds)), session.now))
    return 0


def _show(session: _Session, _args: argparse.Namespace) -> int:
    with session.held() as holds:
        letters = _all(holds)
        for letter in letters:
            print(dl.render_letter(letter, session.now))
        print(f"{len(letters)} shown; nothing was removed")
    return 0


def _export(session: _Session, args: argparse.Namespace) -> int:
    with session.held() as holds:
        letters = _all(holds)
        if args.output == "-":
            _write(sys.stdout.buffer, letters)
        else:
            with open(args.output, "wb") as out:
                _write(out, letters)
        print(f"{len(letters)} exported; nothing was removed", file=sys.stderr)
    return 0


def _write(out: IO[bytes], letters: list[dl.Letter]) -> None:
    for letter in letters:
        out.write(dl.export_line(letter))
    out.flush()


def _replay(session: _Session, args: argparse.Namespace) -> int:
    with session.held() as holds, _delivery_rows(session, holds) as rows:
        letters = _all(holds)
        if args.dry_run:
            unsent = [(letter, why) for held, chosen in holds for letter in chosen
                      if (why := _why_kept(rows, held.queue, letter, set(), dry_run=True)) is not None]
            print(dl.render_groups(dl.groups(letters), session.now))
            print(f"dry run: {len(letters) - len(unsent)} would be replayed; nothing was changed")
            _report_kept(unsent, "would stay dead")
            return 0
        pace, started, done = dl.Pace(args.rate), time.monotonic(), 0
        kept: list[tuple[dl.Letter, str]] = []
        replayed: set[int] = set()
        try:
            for held, chosen in holds:
                for letter in chosen:
                    session.broker.sleep(pace.wait(done, time.monotonic() - started))
                    why = _why_kept(rows, held.queue, letter, replayed)
                    if why is not None:
                        kept.append((letter, why))
                        continue
                    session.broker.republish(held.queue, letter, dl.replay_headers(letter.headers))
                    held.remove(letter)  # only after the broker confirmed the copy
                    if held.queue.delivery_channel is not None and (delivery := dd.delivery_id(letter.body)):
                        replayed.add(delivery)
                    done += 1
                    _progress(done, len(letters), "replayed")
        finally:
            print(f"{done} of {len(letters)} replayed to where they came from", file=sys.stderr)
            _report_kept(kept)
    return 1 if kept else 0


@contextmanager
def _delivery_rows(session: _Session, holds: list[tuple[Held, list[dl.Letter]]]) -> Iterator[DeliveryRows | None]:
    """The deliveries' database, when the selection holds letters of a delivery channel (no other command or queue
    needs it)."""
    if not any(held.queue.delivery_channel is not None and chosen for held, chosen in holds):
        yield None
        return
    rows = DeliveryRows(session.database_url)
    try:
        yield rows
    finally:
        rows.close()


def _why_kept(rows: DeliveryRows | None, queue: DeadLetterQueue, letter: dl.Letter, replayed: set[int],
              dry_run: bool = False) -> str | None:
    """None when the letter is to be sent back; else why it stays dead. A delivery's row is made PENDING first
    (dead_deliveries.py): the letter alone would be acked unsent."""
    if queue.delivery_channel is None or rows is None:
        return None
    delivery = dd.delivery_id(letter.body)
    if delivery is None or delivery in replayed:
        return dd.why_kept(delivery, None, replayed)
    row = rows.look(delivery) if dry_run else rows.reset(delivery)
    return dd.why_kept(delivery, row, replayed, dry_run)


def _report_kept(kept: list[tuple[dl.Letter, str]], what: str = "left dead") -> None:
    for letter, why in kept:
        print(f"{what}: {letter.queue} message_id={letter.message_id}: {why}", file=sys.stderr)
    if kept:
        print(f"{len(kept)} {what} (`walfeed dead purge` removes what is not worth keeping)", file=sys.stderr)


def _purge(session: _Session, args: argparse.Namespace) -> int:
    """Shows the selection, asks with nothing held (a prompt can last longer than a heartbeat), then deletes what
    it showed and is still there: letters that arrived meanwhile are not purged."""
    with session.held() as holds:
        letters = _all(holds)
        if not letters:
            print("nothing to purge")
            return 0
        print(dl.render_groups(dl.groups(letters), session.now))
    if not args.yes:
        if not sys.stdin.isatty():
            print("walfeed dead purge: not a terminal: pass --yes to purge without asking", file=sys.stderr)
            return 2
        if input(f"Delete these {len(letters)} dead letters for good? Type 'yes': ").strip() != "yes":
            print("nothing was purged")
            return 1
    shown = dataclasses.replace(session.selection, ids=frozenset(letter.message_id for letter in letters))
    again = _Session(session.broker, session.queues, shown, session.limit, session.now, session.database_url)
    done = 0
    with again.held() as holds:
        try:
            for held, chosen in holds:
                for letter in chosen:
                    held.remove(letter)
                    done += 1
                    _progress(done, len(letters), "purged")
        finally:
            print(f"{done} of the {len(letters)} shown purged", file=sys.stderr)
    return 0


def _progress(done: int, total: int, what: str) -> None:
    if done % PROGRESS_EVERY == 0 and done < total:
        print(f"{done} of {total} {what}", file=sys.stderr)


_COMMANDS: Final[dict[str, Callable[[_Session, argparse.Namespace], int]]] = {
    "ls": _ls, "show": _show, "replay": _replay, "purge": _purge, "export": _export}
