"""The slot as every process reads it (services/core/slots.py) on a real server, through psycopg 3 and psycopg2,
and `walfeed status`'s view of it."""

from __future__ import annotations

from dataclasses import replace

import psycopg
import psycopg2
import pytest

from services.cli.status import SlotStatus, slot_status
from services.core import slots
from services.core.settings import Settings

pytestmark = pytest.mark.integration


def test_both_drivers_read_the_same_slot(database_url: str, slot_name: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        found = slots.find(conn.cursor(), slot_name)
        dbname = conn.info.dbname
        assert slots.find(conn.cursor(), "walfeed_no_such_slot") is None
    legacy = psycopg2.connect(database_url)
    try:
        again = slots.find(legacy.cursor(), slot_name)
    finally:
        legacy.close()
    assert again is not None and found is not None
    # the server's WAL position moves with other databases'
    assert replace(again, lag_bytes=None, retained_bytes=None) == replace(found, lag_bytes=None, retained_bytes=None)
    assert (found.plugin, found.database, found.active) == (slots.OUTPUT_PLUGIN, dbname, False)
    assert found.confirmed_flush_lsn is not None and "/" in found.confirmed_flush_lsn
    assert found.lag_bytes is not None and found.lag_bytes >= 0
    assert found.retained_bytes is not None and found.wal_status is not None


def test_status_reports_the_slot_or_says_it_is_missing(settings: Settings) -> None:
    status = slot_status(settings)
    assert status.exists and status.active is False and status.error is None and status.lag_bytes is not None
    missing = slot_status(Settings.from_env({"WALFEED_DATABASE_URL": settings.database_url,
                                             "WALFEED_SLOT": "walfeed_no_such_slot"}))
    assert missing == SlotStatus("walfeed_no_such_slot", exists=False, error="slot missing: run `walfeed migrate`")
