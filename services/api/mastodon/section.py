"""The Mastodon routes as one section of the app's routing table, tried first and by path prefix only: a /v1
request passes it with one string comparison, and a Mastodon request is not matched against every /v1 route
before its own (route matching was the largest part of what the Mastodon home timeline cost more than
/v1/timeline, docs/adr/0142)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.datastructures import URLPath
from starlette.routing import BaseRoute, Match
from starlette.types import Receive, Scope, Send


class Section(BaseRoute):
    """Matches the requests whose path starts with one of `prefixes`; `router` then routes them (its own 404 and
    405 for paths and methods it does not serve, answered by the app's handlers)."""

    def __init__(self, prefixes: tuple[str, ...], router: APIRouter) -> None:
        self.prefixes = prefixes
        self.router = router

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] in ("http", "websocket") and scope["path"].startswith(self.prefixes):
            return Match.FULL, {}
        return Match.NONE, {}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.router(scope, receive, send)

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        return self.router.url_path_for(name, **path_params)
