"""`walfeed dead`'s pure part: what a dead letter says, which ones a command selects, how they are grouped, shown,
exported and replayed. No sockets: dead_broker.py holds and settles the messages, dead.py wires the commands."""

from __future__ import annotations

import base64
import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from services.consumer.headers import ATTEMPTS, DEAD_AT, HISTORY, REASON, REPLAYS
from services.core import durations
from services.core.topology import DeadLetterQueue

# The consumers' headers are the runtime's (services/consumer/headers.py, docs/amqp.md): this module reads them, and
# a replayed copy starts without the consumers' history and the broker's (HISTORY).

NO_REASON: Final = "(no reason header)"
NO_TYPE: Final = "-"

# Reasons name event ids, post ids, follower counts: grouped with those replaced, so one failure is one line.
_UUID: Final = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_NUMBER: Final = re.compile(r"(?<![\w.])\d+(?![\w])")


class SelectionError(ValueError):
    """A filter or queue name the command cannot use; the message says what it accepts."""


@dataclass(frozen=True, slots=True)
class Letter:
    """One dead letter as the broker delivered it. `tag` is its delivery tag on the holding channel."""

    queue: str
    tag: int
    body: bytes
    properties: Mapping[str, Any]  # message_id, type, content_type, timestamp, delivery_mode, ...
    headers: Mapping[str, Any] = field(default_factory=dict)

    @property
    def message_id(self) -> str | None:
        value = self.properties.get("message_id")
        return str(value) if value is not None else None

    @property
    def type(self) -> str:
        value = self.properties.get("type")
        return str(value) if value else NO_TYPE

    @property
    def reason(self) -> str:
        """Ours (`x-walfeed-reason`), or, for a letter the broker dead-lettered itself (a quorum work queue's
        delivery limit, docs/adr/0090), the broker's."""
        value = self.headers.get(REASON)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if not value and (broker := _last_death(self.headers)):
            return f"dead-lettered by the broker: {broker}"
        return str(value) if value else NO_REASON

    @property
    def attempts(self) -> int | None:
        value = self.headers.get(ATTEMPTS)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def dead_at(self) -> datetime | None:
        """When it was dead-lettered; for letters from before that header, the event's own time (an upper bound
        of the age)."""
        for value in (self.headers.get(DEAD_AT), self.properties.get("timestamp")):
            if isinstance(value, int) and not isinstance(value, bool):
                return datetime.fromtimestamp(value, UTC)
            if isinstance(value, datetime):
                return value if value.tzinfo else value.replace(tzinfo=UTC)
        return None


def _last_death(headers: Mapping[str, Any]) -> str | None:
    """`reason from queue` of the broker's latest dead-lettering (`x-death` lists the latest first)."""
    deaths = headers.get("x-death")
    if not isinstance(deaths, list) or not deaths or not isinstance(deaths[0], dict):
        return None
    text = {k: v.decode("utf-8", "replace") if isinstance(v, bytes) else v for k, v in deaths[0].items()}
    return f"{text.get('reason')} from {text.get('queue')}"


def reason_group(reason: str) -> str:
    """The reason with ids and numbers replaced: `not in outbox: post.created <id> has no visible outbox row`."""
    return _NUMBER.sub("<n>", _UUID.sub("<id>", reason))


@dataclass(frozen=True, slots=True)
class Filter:
    reason: str | None = None  # case-insensitive substring of the reason
    type: str | None = None  # the event type, shell wildcards allowed (`post.*`)
    since: datetime | None = None  # dead at or after
    ids: frozenset[str | None] | None = None  # only these message ids (what an operator was shown)

    def matches(self, letter: Letter) -> bool:
        if self.ids is not None and letter.message_id not in self.ids:
            return False
        if self.reason is not None and self.reason.lower() not in letter.reason.lower():
            return False
        if self.type is not None and not fnmatch.fnmatchcase(letter.type, self.type):
            return False
        if self.since is not None:
            dead_at = letter.dead_at
            return dead_at is not None and dead_at >= self.since
        return True


def since(text: str | None, now: datetime) -> datetime | None:
    """`--since`: a duration back from now (`2h`) or an RFC 3339 time (`2026-01-01T00:00:00Z`)."""
    if text is None:
        return None
    try:
        return now - durations.parse(text)
    except durations.DurationError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise SelectionError(f"--since {text!r} is neither a duration ({durations.FORM}) nor an RFC 3339 time "
                             "such as 2026-01-01T00:00:00Z") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def resolve(queues: Sequence[DeadLetterQueue], wanted: str | None, prefix: str) -> list[DeadLetterQueue]:
    """Every dead queue, or the one `--queue` names (with or without the prefix)."""
    if wanted is None:
        return list(queues)
    for queue in queues:
        if wanted in (queue.name, queue.name.removeprefix(f"{prefix}.")):
            return [queue]
    known = ", ".join(q.name for q in queues)
    raise SelectionError(f"--queue {wanted!r} is not a dead queue of walfeed; known: {known}")


@dataclass(frozen=True, slots=True)
class Group:
    queue: str
    reason: str
    type: str
    count: int
    oldest: datetime | None


def groups(letters: Iterable[Letter]) -> list[Group]:
    """Counts and oldest dead time per (queue, reason group, type), largest first."""
    counts: dict[tuple[str, str, str], int] = {}
    oldest: dict[tuple[str, str, str], datetime | None] = {}
    for letter in letters:
        key = (letter.queue, reason_group(letter.reason), letter.type)
        counts[key] = counts.get(key, 0) + 1
        dead_at, seen = letter.dead_at, oldest.get(key)
        oldest[key] = dead_at if seen is None or (dead_at is not None and dead_at < seen) else seen
    return sorted((Group(*key, counts[key], oldest[key]) for key in counts),
                  key=lambda g: (g.queue, -g.count, g.reason, g.type))


def render_groups(found: Sequence[Group], now: datetime, width: int = 70) -> str:
    if not found:
        return "no dead letters"
    rows = [("QUEUE", "REASON", "TYPE", "COUNT", "OLDEST")]
    for g in found:
        reason = g.reason if len(g.reason) <= width else g.reason[: width - 3] + "..."
        age = durations.render(now - g.oldest) if g.oldest else "?"
        rows.append((g.queue, reason, g.type, str(g.count), age))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]:>{widths[3]}}  {r[4]}"
             for r in rows]
    total = sum(g.count for g in found)
    return "\n".join([*lines, f"{total} dead letter{'s' if total != 1 else ''}"])


def _text(body: bytes) -> str | None:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def render_letter(letter: Letter, now: datetime) -> str:
    dead_at = letter.dead_at
    age = f"{dead_at.isoformat()} ({durations.render(now - dead_at)} ago)" if dead_at else "?"
    lines = [f"--- {letter.queue}  message_id={letter.message_id}  type={letter.type}",
             f"reason:   {letter.reason}",
             f"attempts: {letter.attempts if letter.attempts is not None else '?'}   dead at: {age}",
             "properties: " + orjson.dumps(_jsonable(letter.properties), option=orjson.OPT_SORT_KEYS).decode(),
             "headers:    " + orjson.dumps(_jsonable(letter.headers), option=orjson.OPT_SORT_KEYS).decode()]
    text = _text(letter.body)
    lines.append("body:       " + (text if text is not None else
                                   "base64:" + base64.b64encode(letter.body).decode()))
    return "\n".join(lines)


def export_line(letter: Letter) -> bytes:
    """One JSON object per letter (JSONL): the body as text when it is UTF-8, else as base64."""
    record: dict[str, Any] = {"queue": letter.queue, "message_id": letter.message_id, "type": letter.type,
                              "reason": letter.reason, "attempts": letter.attempts,
                              "dead_at": letter.dead_at.isoformat() if letter.dead_at else None,
                              "properties": _jsonable(letter.properties), "headers": _jsonable(letter.headers)}
    text = _text(letter.body)
    record["body" if text is not None else "body_base64"] = (
        text if text is not None else base64.b64encode(letter.body).decode())
    return orjson.dumps(record) + b"\n"


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def replay_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    """A replayed copy's headers: without the dead-letter and attempt headers (it gets the whole retry budget
    again), with `x-walfeed-replays` counting the replays."""
    kept = {k: v for k, v in headers.items() if k not in HISTORY}
    previous = headers.get(REPLAYS)
    kept[REPLAYS] = (previous if isinstance(previous, int) and not isinstance(previous, bool) else 0) + 1
    return kept


@dataclass(slots=True)
class Pace:
    """`--rate`: at most `rate` messages per second from the start (0: no limit)."""

    rate: float

    def wait(self, sent: int, elapsed: float) -> float:
        """Seconds to wait before sending message number `sent` + 1, `elapsed` seconds after the first."""
        return 0.0 if self.rate <= 0 else max(0.0, sent / self.rate - elapsed)
