"""The stop flag of a long-running consumer: set by SIGTERM or SIGINT, polled by its loops."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType

log = logging.getLogger(__name__)


def on_signals(then: Callable[[], object] | None = None) -> threading.Event:
    """An event set when the process gets SIGTERM or SIGINT (installs the handlers: main thread only); `then` runs
    after it is set (e.g. telling systemd the process is stopping)."""
    stopping = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("stop requested", extra={"signal": signal.Signals(signum).name})
        stopping.set()
        if then is not None:
            then()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    return stopping
