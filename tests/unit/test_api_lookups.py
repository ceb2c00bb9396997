"""The webhook registration's lookups (services/api/lookups.py): own threads, bounded, each waited for a time."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from services.api.lookups import Lookups, LookupsBusy, LookupTimeout


def test_a_lookup_runs_on_its_own_threads_not_the_loops_default_executor() -> None:
    names = asyncio.run(Lookups(threads=1).run(lambda: threading.current_thread().name))
    assert names.startswith("webhook-dns")


def test_a_lookup_that_hangs_is_given_up_after_its_time() -> None:
    release = threading.Event()
    lookups = Lookups(threads=1, timeout=0.3)
    started = time.monotonic()
    try:
        with pytest.raises(LookupTimeout):
            asyncio.run(lookups.run(lambda: release.wait(30)))
    finally:
        release.set()
    assert time.monotonic() - started < 0.3 + 0.5


def test_past_the_threads_and_the_queue_a_lookup_is_refused_at_once_until_one_finishes() -> None:
    release = threading.Event()
    lookups = Lookups(threads=1, waiting=1, timeout=10)

    async def third() -> str:  # gathered after two that hold the thread and the queue's place
        with pytest.raises(LookupsBusy):
            await lookups.run(lambda: True)
        release.set()
        return "refused"

    async def three() -> list[object]:
        return list(await asyncio.gather(lookups.run(lambda: release.wait(30)),
                                         lookups.run(lambda: release.wait(30)), third()))

    try:
        assert asyncio.run(three()) == [True, True, "refused"]
    finally:
        release.set()
    assert asyncio.run(lookups.run(lambda: "free again")) == "free again"
