"""The api as its own OpenAPI document says: the schemathesis CLI with every check and every phase (examples,
coverage, fuzzing, stateful) against the in-process app (rate limits far above the run's: conftest.TEST_API), its
case count bounded so the run stays under a minute. What it accepts as the api's rightful answers, and why, is in
schemathesis.toml and schemathesis_hooks.py next to this file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.integration.api.conftest import SignUp
from tests.integration.api.schemathesis_hooks import API_URL_VARIABLE

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
CONFIG = Path(__file__).with_name("schemathesis.toml")
EXAMPLES = 40  # per operation and phase: 15-40 s on two shared cores


def test_api_conforms_to_its_openapi_document(api_url: str, client: httpx.Client, signup: SignUp,
                                              tmp_path: Path) -> None:
    alice, bob = signup("alice"), signup("bob")
    client.put(f"/v1/following/{bob.id}", headers=alice.auth)
    for i in range(3):
        client.post("/v1/posts", json={"body": f"seed {i}"}, headers=bob.auth)
    run = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG), "run", f"{api_url}/openapi.json",
         "--checks", "all", "--max-examples", str(EXAMPLES), "--seed", "14", "--workers", "1", "--no-color",
         "--report", "junit", "--report-dir", str(tmp_path)],
        cwd=ROOT, env={**os.environ, API_URL_VARIABLE: api_url},
        capture_output=True, text=True, timeout=300, check=False)
    print(run.stdout[-20000:])
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
