"""The real `walfeed api` process: serves on its port, answers, stops gracefully on SIGTERM; readiness."""

from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import multiprocess

from services.api.app import create_app
from services.api.config import ApiSettings
from services.core.settings import Settings
from testkit.processes import Processes, children_of, free_port
from testkit.waiting import eventually
from tests.integration.api.conftest import serve

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


@pytest.mark.parametrize(("server", "workers", "stop"), [
    ("granian", "1", signal.SIGTERM), ("granian", "2", signal.SIGINT), ("uvicorn", "1", signal.SIGTERM),
    ("uvicorn", "2", signal.SIGINT)])
def test_walfeed_api_process_serves_and_stops_on_sigterm_or_sigint(processes: Processes, server: str, workers: str,
                                                                   stop: signal.Signals) -> None:
    port = free_port()
    api = processes.start("api", "api", "--port", str(port), "--workers", workers, env={
        "WALFEED_API_MAX_BODY_BYTES": "1024", "WALFEED_API_SERVER": server})
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
    assert api.stop(stop, timeout=30) == 0, api.log()


HEALTHZ = {"method": "GET", "route": "/healthz", "status": "200"}


def _metrics_dirs(tmp: Path) -> list[Path]:
    return list(tmp.glob("walfeed-api-metrics-*"))


def _healthz_by_pid(metrics_dir: Path) -> dict[int, float]:
    """GET /healthz as each worker process counted it, from its own file (prometheus_client keeps a process's
    values in `<kind>_<pid>.db`, here `counter_<pid>.db`)."""
    counts: dict[int, float] = {}
    for file in metrics_dir.glob("counter_*.db"):
        merged = multiprocess.MultiProcessCollector.merge([str(file)])  # type: ignore[no-untyped-call]
        counts[int(file.stem.rpartition("_")[2])] = sum(
            s.value for m in merged for s in m.samples
            if s.name == "walfeed_api_requests_total" and s.labels == HEALTHZ)
    return counts


def test_several_worker_processes_share_the_port_and_sum_their_metrics(processes: Processes, tmp_path: Path) -> None:
    port = free_port()
    # TMPDIR: the metrics directory is made under tmp_path, apart from any other `walfeed api` on the machine
    api = processes.start("api", "api", "--port", str(port), env={"WALFEED_API_WORKERS": "2", "TMPDIR": str(tmp_path)})
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: httpx.get(f"{base}/readyz", timeout=5).status_code == 200, timeout=60,
               what="api workers ready")
    dirs = _metrics_dirs(tmp_path)
    assert len(dirs) == 1, dirs  # made by `walfeed api` for its workers
    requests = 0

    def healthz() -> None:
        nonlocal requests
        # a new connection each time: the kernel spreads them over the workers
        assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200
        requests += 1

    for _ in range(30):
        healthz()

    def counted_by_two_workers() -> bool:
        if sum(n > 0 for n in _healthz_by_pid(dirs[0]).values()) >= 2:
            return True
        healthz()  # so far one worker served them all (or has not recorded them yet): one more connection
        return False

    # else a scrape could pass without summing anything: every request and scrape on the same worker
    eventually(counted_by_two_workers, timeout=30, what="GET /healthz counted in files of 2 worker pids")
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
    assert _metrics_dirs(tmp_path) == []  # removed at exit


@pytest.mark.parametrize("server", ["granian", "uvicorn"])
def test_workers_of_a_killed_api_stop_and_free_its_port(processes: Processes, server: str) -> None:
    port = free_port()
    env = {"WALFEED_API_SERVER": server}
    api = processes.start("api", "api", "--port", str(port), "--workers", "2", env=env)
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: httpx.get(f"{base}/readyz", timeout=5).status_code == 200, timeout=60, what="api ready")
    workers = children_of(api.pid)
    assert workers
    api.kill()  # SIGKILL: the supervisor cannot stop them

    def gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as stat:  # a zombie waiting for its reaper is gone too
            return stat.read().rpartition(")")[2].split()[0] == "Z"

    eventually(lambda: all(gone(pid) for pid in workers), timeout=40, what="the killed api's workers to stop")
    again = processes.start("api-again", "api", "--port", str(port), "--workers", "1", env=env)
    eventually(lambda: httpx.get(f"{base}/readyz", timeout=5).status_code == 200, timeout=60, what="new api ready")
    assert again.stop(signal.SIGTERM, timeout=30) == 0, again.log()


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


@pytest.mark.parametrize("workers", ["1", "2"])
def test_metrics_on_an_internal_port_and_docs_off(processes: Processes, tmp_path: Path, workers: str) -> None:
    port, metrics_port = free_port(), free_port()
    api = processes.start("api", "api", "--port", str(port), env={
        "WALFEED_API_WORKERS": workers, "TMPDIR": str(tmp_path), "WALFEED_API_METRICS_PORT": str(metrics_port),
        "WALFEED_API_DOCS": "false"})
    base = f"http://127.0.0.1:{port}"
    eventually(lambda: httpx.get(f"{base}/readyz", timeout=5).status_code == 200, timeout=60, what="api ready")
    for path in ("/metrics", "/docs", "/redoc", "/openapi.json"):  # none of them on the public port
        reply = httpx.get(f"{base}{path}", timeout=10)
        assert reply.status_code == 404 and reply.headers["content-type"] == "application/problem+json", path
    assert httpx.post(f"{base}/v1/users", json={"handle": "metered"}, timeout=10).status_code == 201
    line = 'walfeed_api_requests_total{method="POST",route="/v1/users",status="201"} 1.0'

    def scrape() -> str | None:
        text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
        return text if line in text else None

    assert 'route="/readyz"' in eventually(scrape, timeout=30, what="the sign-up counted on the metrics port")
    assert api.stop(signal.SIGTERM, timeout=30) == 0, api.log()
