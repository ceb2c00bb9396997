"""Messages in, one outcome per message out: classify, apply the batch's database effects, settle each message on
its own by what happened to its event.

The effects failing means retry, for the failing message only: a batch whose transaction fails is applied again one
message at a time, so a poison message retries and dead-letters alone (docs/adr/0024).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from services.core import tracecontext
from services.core.events import Event
from services.worker import decide, policy

log = logging.getLogger(__name__)

Apply = Callable[[list[Event]], Mapping[Event, "str | Exception"]]
FanOutLarge = Callable[[Event], str]


@dataclass(frozen=True, slots=True)
class Message:
    body: bytes
    headers: Mapping[str, object] | None
    refused: str | None = None  # why it cannot be read at all (a malformed group): dead-lettered with this reason


@dataclass(frozen=True, slots=True)
class Result:
    outcome: policy.Outcome
    event_type: str  # "malformed" when the body could not be decoded
    event_id: str | None
    label: str  # what the handler did, or why it failed
    seconds: float
    event: Event | None = None  # the decoded event: a Large outcome's continuation, the delay metric of an Ack


class Processor:
    def __init__(self, apply: Apply, fan_out_large: FanOutLarge | None, retry: policy.RetryPolicy) -> None:
        """`fan_out_large`: None for a consumer whose `apply` never answers decide.LARGE (the notifier)."""
        self._apply = apply
        self._fan_out_large = fan_out_large
        self._retry = retry

    def batch(self, messages: Sequence[Message]) -> list[Result]:
        """One result per message, in order. The decodable ones are applied together in one transaction."""
        started = time.monotonic()
        attempts = [policy.attempt_of(m.headers) for m in messages]
        parsed = [policy.classify(m.body, attempt) if m.refused is None else policy.Dead(
            f"malformed: {m.refused}", attempt) for m, attempt in zip(messages, attempts, strict=True)]
        events = [p for p in parsed if isinstance(p, Event)]
        done = self._apply_isolating(events)
        seconds = (time.monotonic() - started) / max(1, len(messages))
        results = []
        for message, attempt, item in zip(messages, attempts, parsed, strict=True):
            if isinstance(item, policy.Dead):
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
        attempt = policy.attempt_of(message.headers)
        try:
            label: str | Exception = self._fan_out_large(event)
        except policy.Interrupted:
            log.info("fan-out interrupted, returning the message", extra={
                "event_id": str(event.id), "trace_id": tracecontext.trace_id(message.headers)})
            return Result(policy.REQUEUE, event.type, str(event.id), "interrupted", time.monotonic() - started)
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
        except policy.Unavailable as exc:  # no message is to blame: all retry, none alone
            return {event: exc for event in events}
        except Exception as exc:
            if len(events) == 1:
                return {events[0]: exc}
            log.warning("batch failed, applying its events one at a time",
                        extra={"events": len(events), "error": policy.reason_text(exc)})
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
            foreseen = isinstance(done, policy.Expected | policy.Poison)
            log.warning("handler failed", exc_info=None if foreseen else done,
                        extra={**_context(event, attempt, headers), "outcome": type(outcome).__name__,
                               "error": policy.reason_text(done)})
            return Result(outcome, event.type, str(event.id), "failed", seconds)
        if done == decide.LARGE:
            return Result(policy.LARGE, event.type, str(event.id), done, seconds, event)
        if log.isEnabledFor(logging.DEBUG):  # the log context costs microseconds a message: built only if logged
            log.debug("event applied", extra={**_context(event, attempt, headers), "action": done})
        return Result(policy.ACK, event.type, str(event.id), done, seconds, event)


def _context(event: Event, attempt: int, headers: Mapping[str, object] | None) -> dict[str, object]:
    return {"event_id": str(event.id), "trace_id": tracecontext.trace_id(headers), "type": event.type,
            "attempt": attempt}
