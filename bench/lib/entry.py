"""The entry point of a benchmark that owns resources: SIGTERM and SIGINT become KeyboardInterrupt (so that its
`with`/`finally` blocks remove what it created, also when started in the background with SIGINT ignored), and an
interrupted run exits 130 saying so."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from types import FrameType


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run(main: Callable[[], int]) -> None:
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: the bench's databases, queues and processes were removed", file=sys.stderr)
        sys.exit(130)


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())
