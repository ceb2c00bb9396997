"""`walfeed status` rendering: what an operator reads at a glance."""

from datetime import UTC, datetime

from services.cli.status import EmbeddingStatus, QueueStatus, SlotStatus, TablesStatus, _size, render


def test_sizes_read_like_a_person_writes_them() -> None:
    assert [_size(x) for x in (None, 56, 1700, 3 * 1024**2, 15 * 1024**3)] == ["-", "56 B", "1.7 kB", "3.0 MB",
                                                                              "15.0 GB"]


def test_an_inactive_slot_and_dead_letters_stand_out() -> None:
    text = render(
        SlotStatus("walfeed", exists=True, active=False, confirmed_flush_lsn="0/1", lag_bytes=2048,
                   retained_bytes=4096, wal_status="reserved"),
        [QueueStatus("walfeed.fanout", 0, 2), QueueStatus("walfeed.fanout.dead", 3, 0),
         QueueStatus("walfeed.fanout.retry", None, None, error="not declared yet (start a worker)")],
    )
    assert "INACTIVE: no relay is streaming" in text
    assert "lag 2.0 kB, WAL retained 4.0 kB" in text
    assert "<- dead letters: inspect them" in text.splitlines()[-2]
    assert "not declared yet" in text.splitlines()[-1]


def test_a_missing_slot_says_what_to_run() -> None:
    assert "run `walfeed migrate`" in render(SlotStatus("walfeed", exists=False,
                                                        error="slot missing: run `walfeed migrate`"), [])


def test_the_outbox_and_processed_records_show_their_size_and_oldest_row() -> None:
    now = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    text = render(SlotStatus("walfeed", exists=False, error="x"), [],
                  TablesStatus(1200, 3 * 1024**2, 40, 16384, "2026-06-01T09:30:00+00:00"), now)
    outbox, processed = text.splitlines()[-2:]
    assert "~1200 rows, 3.0 MB" in outbox and "2h30m old" in outbox and "walfeed prune-outbox" in outbox
    assert "~40 rows, 16.0 kB" in processed
    assert render(SlotStatus("walfeed", exists=False, error="x"), [], TablesStatus(error="connection refused"),
                  now).splitlines()[-1] == "  connection refused"


def test_embeddings_show_coverage_lag_and_whether_search_uses_the_model() -> None:
    text = render(SlotStatus("walfeed", exists=False, error="x"), [], embeddings=[
        EmbeddingStatus("all-MiniLM-L6-v2-int8", True, 200, 150, 90.0, 120, True),
        EmbeddingStatus("ollama:nomic", False, 200, 20, 86_400.0, 30, False)])
    local, ollama = text.splitlines()[-2:]
    assert "(WALFEED_EMBEDDER): 150 of 200 live posts (75.0%)" in local and "1m30s" in local
    assert "search uses it" in local and "backfill at post 120" in local
    assert "ollama:nomic: 20 of 200" in ollama and "search answers from text" in ollama
    assert render(SlotStatus("walfeed", exists=False, error="x"), [], embeddings=[]).splitlines()[-1] == (
        "  WALFEED_EMBEDDER=off: no model")
