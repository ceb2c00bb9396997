"""The one-statement post writes the post.created event the way services.core.events defines it."""

from services.api import sql
from services.core import events


def test_create_post_statement_writes_the_post_created_event_shape() -> None:
    aggregate_type, keys = events.EVENT_TYPES[events.POST_CREATED]
    text = sql.CREATE_POST
    assert f"'{aggregate_type}', post.id::text, '{events.POST_CREATED}'" in text
    assert all(f"'{key}'" in text for key in keys)
    # the event exists only when the post was inserted: the outbox insert selects from the post CTE
    assert "FROM post\n)" in text and "ON CONFLICT (author_id, idempotency_key) DO NOTHING" in text
