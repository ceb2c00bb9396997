"""The Mastodon client API, a layer of its own over the api's store (docs/mastodon.md): OAuth, accounts,
statuses, the home timeline, notifications and the live stream. `install` wires it into the app when
WALFEED_MASTODON_API is on (the default)."""

from __future__ import annotations

from fastapi import FastAPI

from services.api.mastodon import accounts, errors, instance, notifications, oauth_routes, statuses, views
from services.api.mastodon.auth import GrantCache


def install(app: FastAPI, auth_cache_seconds: float) -> None:
    """The routers, the error shape (outermost: it rewrites the problem documents of every layer inside) and the
    per-process caches."""
    app.state.mastodon_grants = GrantCache(auth_cache_seconds)
    app.state.mastodon_accounts = views.account_cache()
    for router in (oauth_routes.router, instance.router, accounts.router, statuses.router, notifications.router):
        app.include_router(router)
    errors.install(app)
