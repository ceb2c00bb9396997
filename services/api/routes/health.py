"""Liveness, readiness, metrics: no authentication. Metrics are a router of their own: with
WALFEED_API_METRICS_PORT set they are served on that internal port instead (main.py), not on the public one."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.api.models import ReplicaStatus, Status
from services.api.problems import ApiError
from services.api.replica import WRITTEN, Replica

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Status, response_model_exclude_none=True)
async def healthz() -> Status:
    """The process is alive (says nothing about the database)."""
    return Status(status="ok")


@router.get("/readyz", response_model=Status, response_model_exclude_none=True,
            responses={503: {"description": "database unreachable"}})
async def readyz(request: Request) -> Status:
    """The database answers a query within a second. With a read replica, also its reachability and replay lag:
    a replica down does not make the api unready (its reads go to the primary)."""
    replica: Replica | None = request.app.state.replica
    try:
        async with request.app.state.pool.connection(timeout=1.0) as conn:
            row = await (await conn.execute(WRITTEN if replica is not None else "SELECT 1 AS lsn")).fetchone()
    except Exception as exc:  # any failure to reach the database means not ready
        raise ApiError(503, f"the database is not reachable: {type(exc).__name__}", "not-ready",
                       {"Retry-After": "1"}) from None
    if replica is None:
        return Status(status="ok")
    health = await replica.health(int(row["lsn"]))
    return Status(status="ok", replica=ReplicaStatus(status=health.status, lag_bytes=health.lag_bytes))


metrics_router = APIRouter(tags=["operations"])


@metrics_router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}},
                             "description": "Prometheus text exposition"}})
def metrics(request: Request) -> Response:
    """This process's metrics, or with several worker processes all of theirs (prometheus_client multiprocess
    mode: a small file read per scrape, so this one runs on the thread pool)."""
    return Response(generate_latest(request.app.state.scrape_registry), media_type=CONTENT_TYPE_LATEST)
