"""The Mastodon client API, a layer of its own over the api's store (docs/mastodon.md): OAuth, accounts,
statuses, the home timeline, notifications and the live stream. `install` wires it into the app when
WALFEED_MASTODON_API is on (the default)."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from prometheus_client import Gauge

from services.api.db import Pool
from services.api.mastodon import (
    accounts,
    errors,
    instance,
    notifications,
    oauth_routes,
    statuses,
    streaming,
    views,
)
from services.api.mastodon.auth import GrantCache
from services.api.mastodon.feed import LiveFeed
from services.api.mastodon.section import Section
from services.api.mastodon.streamhub import Hub
from services.core.settings import Settings


def install(app: FastAPI, auth_cache_seconds: float) -> None:
    """The routers (one section of the routing table, tried first by path prefix: section.py), the error shape
    (errors.py) and the per-process caches."""
    app.state.mastodon_grants = GrantCache(auth_cache_seconds)
    app.state.mastodon_accounts = views.account_cache()
    app.state.mastodon_statuses = views.status_cache()
    app.state.mastodon_account_json = views.account_json_cache()
    app.state.mastodon_streams = Gauge("walfeed_api_mastodon_streams", "live streams (/api/v1/streaming) open",
                                       registry=app.state.registry, multiprocess_mode="livesum")
    routes = APIRouter()
    for router in (oauth_routes.router, instance.router, accounts.router, statuses.router, notifications.router,
                   streaming.router):
        routes.include_router(router)
    app.router.routes.insert(0, Section(errors.PREFIXES, routes))
    errors.install(app)


def live_feed(app: FastAPI, settings: Settings, pool: Pool, options: str) -> LiveFeed:
    """The process's source of live-stream events (feed.py), started by the first stream it opens; the lifespan
    stops it."""
    feed = LiveFeed(settings, pool, app.state.mastodon_accounts, Hub(), options)
    app.state.mastodon_feed = feed
    feed.end_streams_on_sigterm()
    return feed
