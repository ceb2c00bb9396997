"""The api's timestamps: one format whichever way a response is written (orjson on the listings' hot path, the
models' strings elsewhere), RFC 3339 in UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest

from services.api.models import page_json, post_json, rfc3339

MOMENTS = [
    datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC),
    datetime(2026, 1, 1, 12, 0, 0, 0, tzinfo=UTC),  # microseconds are left out, as orjson and events do
    datetime(2026, 1, 1, 13, 30, 0, 5, tzinfo=timezone(timedelta(hours=1, minutes=30))),  # not a UTC datetime
]


@pytest.mark.parametrize("moment", MOMENTS)
def test_a_listing_and_a_model_write_the_same_moment_the_same_way(moment: datetime) -> None:
    row = {"id": 1, "author_id": 2, "body": "b", "created_at": moment}
    written = orjson.loads(page_json([row], None))["items"][0]["created_at"]
    assert written == orjson.loads(post_json(row))["created_at"] == rfc3339(moment)
    assert written.endswith("Z")
    assert datetime.fromisoformat(written) == moment


def test_the_formats() -> None:
    assert [rfc3339(m) for m in MOMENTS] == [
        "2026-01-01T12:00:00.123456Z", "2026-01-01T12:00:00Z", "2026-01-01T12:00:00.000005Z"]
