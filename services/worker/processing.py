"""One message in, one outcome out: classify, run the critical effects, then the best-effort hooks.

The split is explicit: `handle` (database effects) failing means retry; a best-effort hook failing is logged
and counted, and the message is still acknowledged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from services.core.events import Event
from services.worker import policy

log = logging.getLogger(__name__)

Handle = Callable[[Event], str]
BestEffortHook = Callable[[Event, str], None]


@dataclass(frozen=True, slots=True)
class Result:
    outcome: policy.Outcome
    event_type: str  # "malformed" when the body could not be decoded
    event_id: str | None
    label: str  # what the handler did, or why it failed
    seconds: float


class Processor:
    def __init__(self, handle: Handle, retry: policy.RetryPolicy, best_effort: Sequence[BestEffortHook] = ()) -> None:
        self._handle = handle
        self._retry = retry
        self._best_effort = tuple(best_effort)

    def __call__(self, body: bytes, headers: Mapping[str, object] | None) -> Result:
        started = time.monotonic()
        attempt = policy.attempt_of(headers)
        parsed = policy.classify(body, attempt)
        if isinstance(parsed, policy.Dead):
            log.warning("malformed message", extra={"reason": parsed.reason})
            return Result(parsed, "malformed", None, "malformed", time.monotonic() - started)
        context = {"event_id": str(parsed.id), "type": parsed.type, "attempt": attempt}
        try:
            label = self._handle(parsed)  # critical: the database effects, committed when this returns
        except policy.Interrupted:
            log.info("handler interrupted, returning the message", extra=context)
            return Result(policy.REQUEUE, parsed.type, str(parsed.id), "interrupted", time.monotonic() - started)
        except Exception as exc:  # any handler bug becomes a retry, never a dead consumer
            reason = policy.reason_text(exc)
            outcome = self._retry.after_failure(attempt, reason)
            log.warning("handler failed", exc_info=not isinstance(exc, policy.Expected),
                        extra={**context, "outcome": type(outcome).__name__, "error": reason})
            return Result(outcome, parsed.type, str(parsed.id), "failed", time.monotonic() - started)
        for hook in self._best_effort:
            try:
                hook(parsed, label)
            except Exception:  # best effort by definition
                log.warning("best-effort hook failed", exc_info=True, extra={**context, "hook": repr(hook)})
        log.debug("event applied", extra={**context, "action": label})
        return Result(policy.ACK, parsed.type, str(parsed.id), label, time.monotonic() - started)
