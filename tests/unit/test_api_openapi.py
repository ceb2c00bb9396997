"""The OpenAPI document: every operation documents its errors as problem documents; auth is declared."""

import asyncio
import re
from typing import Any

import httpx
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute, Match

from services.api.app import RESOURCES, create_app, dispatch_order
from services.api.config import ApiSettings
from services.api.routes import health
from services.core.settings import Settings


def _doc() -> dict[str, Any]:
    return create_app(Settings.from_env({}), ApiSettings()).openapi()


def test_errors_are_documented_as_problems() -> None:
    doc = _doc()
    assert "Problem" in doc["components"]["schemas"]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for code, response in op["responses"].items():
                if int(code) >= 400:
                    assert list(response["content"]) == ["application/problem+json"], (method, path, code)


def test_authenticated_operations_declare_bearer_and_401() -> None:
    doc = _doc()
    public = {("post", "/v1/users"), ("get", "/healthz"), ("get", "/readyz"), ("get", "/metrics"),
              ("post", "/v1/unsubscribe")}  # RFC 8058: the signed token is the authority, no bearer
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if (method, path) in public:
                assert "401" not in op["responses"]
            else:
                assert "401" in op["responses"] and op.get("security"), (method, path)


def test_limits_are_in_the_schema() -> None:
    doc = _doc()
    body = doc["components"]["schemas"]["NewPost"]["properties"]["body"]
    assert (body["minLength"], body["maxLength"]) == (1, 500)
    params = {p["name"]: p for p in doc["paths"]["/v1/timeline"]["get"]["parameters"]}
    assert (params["limit"]["schema"]["minimum"], params["limit"]["schema"]["maximum"]) == (1, 100)


def test_a_405_allows_every_method_the_document_serves_at_that_path() -> None:
    """RFC 9110: Allow lists every supported method, also where two routes serve one path (PUT and DELETE)."""
    app = create_app(Settings.from_env({}), ApiSettings())
    paths = app.openapi()["paths"]

    async def allow_of_405s() -> dict[str, str]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            replies = {path: await client.request("PUT" if "patch" in paths[path] else "PATCH",
                                                  path.replace("{user_id}", "1").replace("{post_id}", "1"))
                       for path in paths}
        assert {reply.status_code for reply in replies.values()} == {405}
        return {path: reply.headers["allow"] for path, reply in replies.items()}

    for path, allow in asyncio.run(allow_of_405s()).items():
        documented = {method.upper() for method in paths[path]}
        assert set(allow.split(", ")) == documented | ({"HEAD"} if "GET" in documented else set()), path


def test_matching_the_most_requested_routers_first_changes_no_match() -> None:
    """The routers are tried in dispatch order, documented by resource: every documented operation, at paths its
    template and the others' make, is matched by the same route in both orders (a 405's Allow comes from the
    document, so which route matched a path by its pattern alone does not matter)."""
    documented = [route for router in RESOURCES for route in router.routes]
    dispatched = [route for router in dispatch_order(RESOURCES) for route in router.routes]
    templates = {route.path for route in documented if isinstance(route, APIRoute)}
    paths = {re.sub(r"\{[^}]+\}", value, template) for template in templates for value in ("1", "me", "x")}

    def first(routes: list[BaseRoute], method: str, path: str) -> BaseRoute | None:
        scope = {"type": "http", "method": method, "path": path, "root_path": ""}
        return next((route for route in routes if route.matches(scope)[0] == Match.FULL), None)

    for path in paths:
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            assert first(dispatched, method, path) is first(documented, method, path), (method, path)


def test_the_document_lists_operations_by_resource() -> None:
    assert list(_doc()["paths"]) == list(dict.fromkeys(
        route.path for router in (*RESOURCES, health.metrics_router) for route in router.routes
        if isinstance(route, APIRoute)))
