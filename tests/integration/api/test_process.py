"""The real `walfeed api` process: serves on its port, answers, stops gracefully on SIGTERM; readiness."""

from __future__ import annotations

import dataclasses
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from services.api.app import create_app
from services.api.config import ApiSettings
from services.core.settings import Settings
from tests.harness.processes import Processes, free_port
from tests.harness.waiting import eventually
from tests.integration.api.conftest import serve

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def test_walfeed_api_process_serves_and_stops_on_sigterm(processes: Processes) -> None:
    port = free_port()
    api = processes.start("api", "api", "--port", str(port), env={"WALFEED_API_MAX_BODY_BYTES": "1024"})
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, timeout=10) as client:
        eventually(lambda: client.get("/readyz").status_code == 200, timeout=30, what="api ready")
        user = client.post("/v1/users", json={"handle": "proc"}).json()
        auth = {"Authorization": f"Bearer {user['token']}"}
        post = client.post("/v1/posts", json={"body": "from a real process"}, headers=auth)
        assert post.status_code == 201
        page = client.get("/v1/timeline", headers=auth).json()
        assert [p["id"] for p in page["items"]] == [post.json()["id"]]
        big = client.post("/v1/posts", content=b"{" + b" " * 2000 + b"}", headers={
            **auth, "content-type": "application/json"})
        assert big.status_code == 413  # the limit came from WALFEED_API_MAX_BODY_BYTES
        assert 'route="/v1/timeline"' in client.get("/metrics").text
    assert api.stop(signal.SIGTERM, timeout=30) == 0, api.log()


def _metrics_dirs() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("walfeed-api-metrics-*"))


def test_several_worker_processes_share_the_port_and_sum_their_metrics(processes: Processes) -> None:
    port = free_port()
    before = _metrics_dirs()
    api = processes.start("api", "api", "--port", str(port), env={"WALFEED_API_WORKERS": "2"})
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: _ready(base), timeout=60, what="api workers ready")
    assert len(_metrics_dirs() - before) == 1  # made by `walfeed api` for its workers
    requests = 30
    for _ in range(requests):  # a new connection each time: the kernel spreads them over the workers
        assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200
    signup = httpx.post(f"{base}/v1/users", json={"handle": "workers"}, timeout=10).json()
    post = httpx.post(f"{base}/v1/posts", json={"body": "hi"}, timeout=10,
                      headers={"Authorization": f"Bearer {signup['token']}"})
    assert post.status_code == 201
    line = f'walfeed_api_requests_total{{method="GET",route="/healthz",status="200"}} {float(requests)}'
    for _ in range(6):  # whichever worker answers the scrape, it reports every worker's requests
        text = httpx.get(f"{base}/metrics", timeout=10).text
        assert line in text, text
        assert 'walfeed_api_requests_total{method="POST",route="/v1/posts",status="201"} 1.0' in text
    assert api.stop(signal.SIGTERM, timeout=30) == 0, api.log()
    assert _metrics_dirs() - before == set()  # removed at exit


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def test_bad_api_setting_stops_at_start_naming_it(processes: Processes) -> None:
    proc = processes.start("api", "api", "--port", str(free_port()), env={"WALFEED_API_POOL_MAX": "many"})
    assert proc.wait(timeout=30) == 2
    assert "WALFEED_API_POOL_MAX" in proc.log()


@pytest.fixture
def unreachable_api(settings: Settings) -> Iterator[str]:
    broken = dataclasses.replace(settings, database_url="postgresql://postgres@127.0.0.1:1/nowhere")
    with serve(create_app(broken, ApiSettings(pool_min=0, pool_max=2, pool_timeout=0.5))) as url:
        yield url


def test_database_down_is_503_problem_not_500(unreachable_api: str) -> None:
    with httpx.Client(base_url=unreachable_api, timeout=10) as client:
        assert client.get("/healthz").status_code == 200
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.headers["content-type"] == "application/problem+json"
        signup = client.post("/v1/users", json={"handle": "x"})
        assert signup.status_code == 503 and signup.json()["status"] == 503
