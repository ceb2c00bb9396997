"""The handler of a consumer of the events exchange (the fan-out worker, the notifier, the next one): messages in,
one outcome per message out. Classify, apply the batch's database effects (the consumer's `apply`), settle each
message on its own by what happened to its event.

The effects failing means retry, for the failing message only: a batch whose transaction fails is applied again one
message at a time, so a poison message retries and dead-letters alone (docs/adr/0024).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence

from services.consumer import outcomes
from services.consumer.headers import attempt_of
from services.consumer.messages import Message, Result
from services.consumer.retry import RetryPolicy
from services.core import tracecontext
from services.core.events import FANOUT_TYPES, Event, MalformedEvent, decode

log = logging.getLogger(__name__)

Apply = Callable[[list[Event]], Mapping[Event, "str | Exception"]]
FanOutLarge = Callable[[Event], str]


def classify(body: bytes, attempt: int, types: Collection[str] = FANOUT_TYPES,
             kind: str = "fan-out") -> Event | outcomes.Dead:
    """A decodable event of `types` to handle, or a message that can never succeed (dead at once, with the reason).
    `kind` names those types in the reason."""
    try:
        event = decode(body)
    except MalformedEvent as exc:
        return outcomes.Dead(f"malformed: {exc}", attempt)
    if event.type not in types:
        return outcomes.Dead(f"malformed: {event.type} is not a {kind} event", attempt)
    return event


class Processor:
    def __init__(self, apply: Apply, retry: RetryPolicy, *, large: FanOutLarge | None = None,
                 types: Collection[str] = FANOUT_TYPES, kind: str = "fan-out") -> None:
        """`apply`: the consumer's handler; `retry`: its policy. `large`: what goes on with an event `apply` answered
        LARGE_LABEL for (the fan-out worker's large audiences; no other consumer has one). `types`: the event types
        it handles (any other is dead-lettered as malformed), named `kind` in the reason."""
        self._apply = apply
        self._fan_out_large = large
        self._retry = retry
        self._types = types
        self._kind = kind

    def batch(self, messages: Sequence[Message]) -> list[Result]:
        """One result per message, in order. The decodable ones are applied together in one transaction."""
        started = time.monotonic()
        attempts = [attempt_of(m.headers) for m in messages]
        parsed = [classify(m.body, attempt, self._types, self._kind) if m.refused is None else outcomes.Dead(
            f"malformed: {m.refused}", attempt) for m, attempt in zip(messages, attempts, strict=True)]
        events = [p for p in parsed if isinstance(p, Event)]
        done = self._apply_isolating(events)
        seconds = (time.monotonic() - started) / max(1, len(messages))
        results = []
        for message, attempt, item in zip(messages, attempts, parsed, strict=True):
            if isinstance(item, outcomes.Dead):
                log.warning("malformed message", extra={"reason": item.reason,
                                                        "trace_id": tracecontext.trace_id(message.headers)})
                results.append(Result(item, "malformed", None, "malformed", seconds))
            else:
                results.append(self._settle(item, attempt, done[item], seconds, message.headers))
        return results

    def large(self, message: Message, event: Event) -> Result:
        """The continuation of a Large outcome: the post's audience in chunks, on a large fan-out thread."""
        assert self._fan_out_large is not None, "a LARGE outcome from a consumer without large fan-outs"
        started = time.monotonic()
        attempt = attempt_of(message.headers)
        try:
            label: str | Exception = self._fan_out_large(event)
        except outcomes.Interrupted:
            log.info("fan-out interrupted, returning the message", extra={
                "event_id": str(event.id), "trace_id": tracecontext.trace_id(message.headers)})
            return Result(outcomes.REQUEUE, event.type, str(event.id), "interrupted", time.monotonic() - started)
        except Exception as exc:  # any handler bug becomes a retry, never a dead consumer
            label = exc
        return self._settle(event, attempt, label, time.monotonic() - started, message.headers)

    def _apply_isolating(self, events: list[Event]) -> Mapping[Event, str | Exception]:
        """The batch in one transaction; if that transaction fails, each event in a transaction of its own, so a
        failure stays with the message that causes it."""
        if not events:
            return {}
        try:
            return self._apply(events)
        except outcomes.Unavailable as exc:  # no message is to blame: all retry, none alone
            return {event: exc for event in events}
        except Exception as exc:
            if len(events) == 1:
                return {events[0]: exc}
            log.warning("batch failed, applying its events one at a time",
                        extra={"events": len(events), "error": outcomes.reason_text(exc)})
        done: dict[Event, str | Exception] = {}
        for event in events:
            try:
                done.update(self._apply([event]))
            except Exception as exc:
                done[event] = exc
        return done

    def _settle(self, event: Event, attempt: int, done: str | Exception, seconds: float,
                headers: Mapping[str, object] | None) -> Result:
        if isinstance(done, Exception):
            outcome = self._retry.after_error(attempt, done)
            foreseen = isinstance(done, outcomes.Expected | outcomes.Poison)
            log.warning("handler failed", exc_info=None if foreseen else done,
                        extra={**_context(event, attempt, headers), "outcome": type(outcome).__name__,
                               "error": outcomes.reason_text(done)})
            return Result(outcome, event.type, str(event.id), "failed", seconds)
        if done == outcomes.LARGE_LABEL:
            return Result(outcomes.LARGE, event.type, str(event.id), done, seconds, event)
        if log.isEnabledFor(logging.DEBUG):  # the log context costs microseconds a message: built only if logged
            log.debug("event applied", extra={**_context(event, attempt, headers), "action": done})
        return Result(outcomes.ACK, event.type, str(event.id), done, seconds, event)


def _context(event: Event, attempt: int, headers: Mapping[str, object] | None) -> dict[str, object]:
    return {"event_id": str(event.id), "trace_id": tracecontext.trace_id(headers), "type": event.type,
            "attempt": attempt}
