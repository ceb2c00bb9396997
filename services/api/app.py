"""The FastAPI application factory: routes, problem documents, middleware, the pool's lifespan, OpenAPI."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.openapi.utils import get_openapi
from prometheus_client import CollectorRegistry, multiprocess

from services.api import db, mastodon, problems, revocations, store
from services.api.authcache import Caches, TokenCache
from services.api.config import ApiSettings
from services.api.middleware import Edge
from services.api.problems import Problem
from services.api.readafter import WriteMemory
from services.api.replica import Replica
from services.api.routes import feed, health, notifications, posts, search, users, webhooks
from services.api.search_config import SearchSettings
from services.api.searching import Search
from services.core import tracing
from services.core.embedding.config import EmbedderSettings
from services.core.settings import Settings
from services.core.topology import Topology

_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}

# The routers in the order the OpenAPI document lists their operations, by resource.
RESOURCES = (users.router, posts.router, feed.router, notifications.router, webhooks.router, search.router,
             health.router)
# Matched first: FastAPI tries every route of an included router before the next router, and each try costs
# (the users router's 15 routes were a sixth of a timeline read's CPU, docs/adr/0151). No path of these two is
# also a path of the routers they pass (tests/unit/test_api_openapi.py matches every documented path both ways).
MOST_REQUESTED = (feed.router, posts.router)


def dispatch_order(routers: Sequence[APIRouter]) -> list[APIRouter]:
    """The order requests are matched against `routers`: MOST_REQUESTED first."""
    return [*MOST_REQUESTED, *(router for router in routers if router not in MOST_REQUESTED)]


def create_app(settings: Settings, api_settings: ApiSettings | None = None,
               traces: tracing.Tracing | None = None, search_settings: SearchSettings | None = None,
               embedder_settings: EmbedderSettings | None = None) -> FastAPI:
    api = api_settings or ApiSettings.from_env()
    search_settings = search_settings or SearchSettings.from_env()
    embedder_settings = embedder_settings or EmbedderSettings.from_env()
    traces = traces if traces is not None else tracing.setup("walfeed-api")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        options = db.session_options(api.statement_timeout)
        pool = db.make_pool(settings.database_url, min_size=api.pool_min, max_size=api.pool_max,
                            timeout=api.pool_timeout, options=options)
        await pool.open(wait=False)  # start even while the database is down: /readyz tells
        app.state.pool = pool
        app.state.replica = await _open_replica(api, options, app.state.registry, pool)
        await app.state.search.start(settings.database_url, pool)
        live = mastodon.live_feed(app, settings, pool, options) if api.mastodon_api else None
        # every token change (this process's and, through the listener, every other's): the caches forget the
        # user, the user's live streams end
        caches = Caches(app.state.token_cache, *([app.state.mastodon_grants, live.hub] if live is not None else []))
        app.state.token_changes = caches
        listener = (asyncio.create_task(revocations.listen(settings.database_url, caches, options))
                    if api.auth_cache_seconds > 0 or live is not None else None)
        try:
            yield
        finally:
            if live is not None:
                await live.stop()
            if listener is not None:
                listener.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await listener
            await app.state.search.stop()
            await pool.close()
            if app.state.replica is not None:
                await app.state.replica.pool.close()

    app = FastAPI(title="walfeed", version="1", lifespan=lifespan,
                  description="News feed API. Errors are RFC 9457 problem documents.",
                  # WALFEED_API_DOCS=false: no schema or UI routes at all (the schema is still app.openapi())
                  docs_url="/docs" if api.docs else None, redoc_url="/redoc" if api.docs else None,
                  openapi_url="/openapi.json" if api.docs else None)
    app.state.settings = settings
    app.state.replica = None  # set by the lifespan when WALFEED_DATABASE_READ_URL is
    app.state.api_settings = api
    app.state.token_cache = TokenCache(api.auth_cache_seconds)
    app.state.timeline_partitions = store.TimelinePartitions()  # the home read names the reader's (ADR 0153)
    app.state.tracing = traces  # spans around outbox writes, and per request when configured (ADR 0072)
    app.state.events_exchange = Topology(settings.amqp_prefix).events_exchange
    app.state.registry = CollectorRegistry()
    app.state.scrape_registry = scrape_registry(app.state.registry)
    app.state.search = Search(search_settings, app.state.registry, embedder_settings)  # started by the lifespan
    documented = [*RESOURCES, *([] if api.metrics_port else [health.metrics_router])]  # else main.py serves them
    for router in dispatch_order(documented):
        app.include_router(router)
    problems.install(app)
    app.add_middleware(Edge, max_bytes=api.max_body_bytes, registry=app.state.registry,
                       error=mastodon.errors.edge_error if api.mastodon_api else None)
    if api.mastodon_api:  # after problems.install: it wraps those handlers for the Mastodon paths
        mastodon.install(app, api.auth_cache_seconds)
    traces.install(app)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _problem_openapi(get_openapi(
                title=app.title, version=app.version, description=app.description,
                routes=[route for router in documented for route in router.routes]))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


async def _open_replica(api: ApiSettings, options: str, registry: CollectorRegistry,
                        primary: db.Pool) -> Replica | None:
    """The read replica's pool (same sizes as the primary's), or None when WALFEED_DATABASE_READ_URL is unset."""
    if api.read_url is None:
        return None
    pool = db.make_pool(api.read_url, min_size=api.pool_min, max_size=api.pool_max, timeout=api.pool_timeout,
                        options=options, name="walfeed-api-replica")
    await pool.open(wait=False)  # a replica down at start: reads go to the primary until it answers
    return Replica(pool, wait=api.read_after_wait, retry=api.replica_retry, max_waiters=max(1, api.pool_max // 2),
                   memory=WriteMemory(api.read_after_memory), registry=registry, primary=primary)


def scrape_registry(own: CollectorRegistry) -> CollectorRegistry:
    """What /metrics exposes: this process's registry, or, when main.run started several worker processes and
    set PROMETHEUS_MULTIPROC_DIR (prometheus_client then keeps every value in a file per process), the sum of
    all processes' files."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        return own
    combined = CollectorRegistry()
    multiprocess.MultiProcessCollector(combined, path=directory)  # type: ignore[no-untyped-call]
    return combined


# On every response of an operation counted against a rate limit (middleware.Edge).
_RATE_LIMIT_HEADERS = {
    "RateLimit-Policy": {"schema": {"type": "string"}, "description": 'the limit counted, e.g. "write";q=120;w=60'},
    "RateLimit": {"schema": {"type": "string"}, "description": 'what is left of it, e.g. "write";r=119;t=42'},
}


def _not_null(parameter: dict[str, Any]) -> None:
    """An optional header is absent or a string, never JSON null: FastAPI writes `str | None` as
    `anyOf: [string, null]`, which makes clients (and schemathesis) send the text "null"."""
    options = parameter.get("schema", {}).get("anyOf")
    if parameter.get("in") == "header" and options and {"type": "null"} in options:
        kept = [o for o in options if o != {"type": "null"}]
        if len(kept) == 1:
            parameter["schema"] = {**{k: v for k, v in parameter["schema"].items() if k != "anyOf"}, **kept[0]}


def _problem_openapi(schema: dict[str, Any]) -> dict[str, Any]:
    """Every 4xx/5xx response is documented as application/problem+json with the Problem schema."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                _not_null(parameter)
            responses = operation.get("responses", {})
            for code, response in responses.items():
                if code.isdigit() and int(code) >= 400:
                    response["content"] = {problems.MEDIA_TYPE: {"schema": _PROBLEM_REF}}
                    if code == "401":
                        response["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"},
                                                                    "description": "Bearer realm"}}
                if "429" in responses:
                    response["headers"] = {**response.get("headers", {}), **_RATE_LIMIT_HEADERS}
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    components["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    return schema
