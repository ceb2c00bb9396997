"""toot 0.52.1, the command-line client, as a subprocess against the real processes: `toot login_cli`, `toot
follow` (found through /api/v2/search), `toot post`, `toot timeline`, `toot notifications`, `toot unfollow`; each
exits 0 and says what it did. Each person has a toot configuration directory of their own (XDG_CONFIG_HOME)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.waiting import eventually
from tests.integration.mastodon.conftest import PASSWORD, SignUp, Stack

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

TOOT = str(Path(sys.executable).with_name("toot"))


def _toot(home: Path, *args: str) -> str:
    """Run toot as `home`'s person; its output (exit 0 asserted)."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(home / "config"), "HOME": str(home), "NO_COLOR": "1",
           "TERM": "dumb", "COLUMNS": "120"}
    done = subprocess.run([TOOT, *args], env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"toot {args[0]}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_toot_logs_in_follows_posts_and_reads_its_timeline_and_notifications(stack: Stack, signup: SignUp,
                                                                            tmp_path: Path) -> None:
    signup("writer"), signup("reader")
    writer, reader = tmp_path / "writer", tmp_path / "reader"
    for home, handle in ((writer, "writer"), (reader, "reader")):
        said = _toot(home, "login_cli", "--instance", stack.base, "--email", handle, "--password", PASSWORD)
        assert "Successfully logged in" in said
        assert f'"{handle}@' in (home / "config" / "toot" / "config.json").read_text()

    assert "You are now following writer" in _toot(reader, "follow", "writer")
    posted = _toot(writer, "post", "hello @reader, from toot")
    assert "Toot posted" in posted and "/@writer/" in posted

    shown = _until(reader, "from toot", "timeline", "--once")
    assert "hello @reader, from toot" in shown and "@writer" in shown

    mentioned = _until(reader, "mentioned you", "notifications")
    assert "writer" in mentioned and "hello @reader, from toot" in mentioned
    assert "reader" in _until(writer, "now follows you", "notifications")
    assert "You are no longer following writer" in _toot(reader, "unfollow", "writer")


def _until(home: Path, expected: str, *args: str) -> str:
    """toot's output once it shows `expected` (the pipeline runs between the write and this read)."""
    def probe() -> str | None:
        out = _toot(home, *args)
        return out if expected in out else None

    return eventually(probe, timeout=30, what=f"{expected!r} in toot {' '.join(args)}")
