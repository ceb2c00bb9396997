"""The stop flag of a long-running consumer: set by SIGTERM or SIGINT, polled by its loops."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

log = logging.getLogger(__name__)


def on_signals() -> threading.Event:
    """An event set when the process gets SIGTERM or SIGINT (installs the handlers: main thread only)."""
    stopping = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("stop requested", extra={"signal": signal.Signals(signum).name})
        stopping.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    return stopping
