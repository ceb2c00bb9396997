"""When a failed message is tried again, and when it is given up: the retry policy of the consumers whose handler
raises (the fan-out worker, the notifier, the next one). Pure: the random source is an argument."""

from __future__ import annotations

import random
from dataclasses import dataclass

from services.consumer.outcomes import Dead, Expected, Poison, Retry, Unavailable, reason_text
from services.core import backoff


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int
    base: float
    cap: float

    def after_error(self, attempt: int, exc: BaseException, rand: random.Random | None = None) -> Retry | Dead:
        """The message failed on try `attempt` (1-based): retry later, or give up into the dead queue. By the
        failure's kind: Poison is dead at once, an Expected failure with a budget of its own gets at most that many
        tries, anything else the policy's."""
        if isinstance(exc, Poison):  # its message is the reason, as a malformed message's is
            return Dead(reason_text(exc, with_type=False), attempt)
        reason = reason_text(exc)
        if isinstance(exc, Unavailable):
            return Retry(attempt, self._delay_ms(attempt + 1, rand), reason)
        budget = exc.attempts if isinstance(exc, Expected) and exc.attempts is not None else self.max_attempts
        return self._after(attempt, reason, min(budget, self.max_attempts), rand)

    def _after(self, attempt: int, reason: str, max_attempts: int, rand: random.Random | None) -> Retry | Dead:
        if attempt >= max_attempts:
            return Dead(f"attempts exhausted: {reason}", attempt)
        return Retry(attempt + 1, self._delay_ms(attempt, rand), reason)

    def _delay_ms(self, attempt: int, rand: random.Random | None) -> int:
        return max(1, round(backoff.delay(attempt, self.base, self.cap, rand) * 1000))
