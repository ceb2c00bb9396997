"""An operator command that fails says so in one line on stderr, with its exit code: no traceback
(docs/operations.md)."""

from __future__ import annotations

import pytest

from services.cli import main


def test_rebuild_against_a_database_it_cannot_reach_prints_one_line_not_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("WALFEED_DATABASE_URL", "postgresql://walfeed@127.0.0.1:1/walfeed?connect_timeout=2")
    assert main(["rebuild", "timelines", "--all"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("walfeed rebuild: the database failed") and "Traceback" not in err
