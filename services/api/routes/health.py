"""Liveness, readiness, metrics: no authentication. Metrics are a router of their own: with
WALFEED_API_METRICS_PORT set they are served on that internal port instead (main.py), not on the public one."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.api.models import Status
from services.api.problems import ApiError

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Status)
async def healthz() -> Status:
    """The process is alive (says nothing about the database)."""
    return Status(status="ok")


@router.get("/readyz", response_model=Status, responses={503: {"description": "database unreachable"}})
async def readyz(request: Request) -> Status:
    """The database answers a query within a second."""
    try:
        async with request.app.state.pool.connection(timeout=1.0) as conn:
            await conn.execute("SELECT 1")
    except Exception as exc:  # any failure to reach the database means not ready
        raise ApiError(503, f"the database is not reachable: {type(exc).__name__}", "not-ready",
                       {"Retry-After": "1"}) from None
    return Status(status="ok")


metrics_router = APIRouter(tags=["operations"])


@metrics_router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}},
                             "description": "Prometheus text exposition"}})
def metrics(request: Request) -> Response:
    """This process's metrics, or with several worker processes all of theirs (prometheus_client multiprocess
    mode: a small file read per scrape, so this one runs on the thread pool)."""
    return Response(generate_latest(request.app.state.scrape_registry), media_type=CONTENT_TYPE_LATEST)
