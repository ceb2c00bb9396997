"""Idle outbox, busy database: the slot's confirmed position follows the WAL, so Postgres keeps no WAL for it."""

from __future__ import annotations

import psycopg
import pytest

from testkit.waiting import eventually
from tests.integration.relay.conftest import StartRelay, Watcher, current_lsn, slot_lsn

pytestmark = pytest.mark.integration

MEGABYTES = 40


def test_confirmed_position_follows_writes_to_other_tables(database_url: str, slot_name: str, watcher: Watcher,
                                                           start_relay: StartRelay) -> None:
    start_relay()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE filler (id bigserial PRIMARY KEY, junk text)")
        start = current_lsn(database_url)
        for _ in range(MEGABYTES // 4):  # ~4 MB of rows per transaction
            conn.execute("INSERT INTO filler (junk) SELECT repeat(md5(g::text), 30) FROM generate_series(1, 4000) g")
    end = current_lsn(database_url)
    assert end - start > (MEGABYTES - 5) * 1_000_000
    eventually(lambda: slot_lsn(database_url, slot_name) >= end, timeout=60, what="slot follows the WAL")
    # and keeps following (keepalive positions when nothing else happens)
    later = current_lsn(database_url)
    eventually(lambda: slot_lsn(database_url, slot_name) >= later, timeout=30, what="slot keeps following")
    assert watcher.pump() == 0
