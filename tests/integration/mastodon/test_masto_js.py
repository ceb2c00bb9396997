"""masto.js 8.0.0 (npm `masto`, the client library of the Elk web app), unmodified, from a small Node script
(tests/integration/mastodon/masto/client.mjs) against the real processes: an app, the password grant, follow,
posts, the home timeline read with its paginator (two a page, each post once, newest first), and the posts
received as streamed updates over the WebSocket."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.mastodon.conftest import PASSWORD, SignUp, Stack

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

HERE = Path(__file__).with_name("masto")
NODE = shutil.which("node")
NPM = shutil.which("npm")


@pytest.fixture(scope="module")
def masto() -> Path:
    """A directory outside the tree with the script and masto 8.0.0 installed from npm (package.json pins it),
    kept between runs in the user's cache."""
    if NODE is None or NPM is None:
        pytest.skip("node and npm are not on PATH: the masto.js client test needs Node 20 or later")
    place = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "walfeed" / "masto-8.0.0"
    place.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "client.mjs"):
        shutil.copyfile(HERE / name, place / name)
    if not (place / "node_modules" / "masto" / "package.json").exists():
        done = subprocess.run([NPM, "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=place,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    return place


def test_masto_js_logs_in_posts_pages_the_home_timeline_and_streams_updates(stack: Stack, signup: SignUp,
                                                                           masto: Path) -> None:
    signup("reader"), signup("author")
    assert NODE is not None
    # Node 20 has WebSocket behind a flag (on by default from Node 22, which masto 8 asks for)
    done = subprocess.run([NODE, "--experimental-websocket", "--no-warnings", str(masto / "client.mjs"),
                           stack.base, "reader", "author", PASSWORD], cwd=masto, capture_output=True, text=True,
                          timeout=90)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["me"] == "reader" and seen["following"] is True
    assert sorted(seen["streamed"]) == sorted(seen["posted"])  # each post streamed once
    newest_first = sorted(seen["posted"], key=int, reverse=True)
    assert seen["timeline"] == newest_first
