"""FastRoute (docs/adr/0151): a route's parameters read without FastAPI's solver answer every request exactly as
FastAPI does, and the OpenAPI document shows exactly what the reader reads."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Iterator, MutableMapping
from typing import Any
from urllib.parse import urlencode

import orjson
import pytest
from fastapi import FastAPI, Request, Response
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.api import problems
from services.api.app import create_app
from services.api.config import ApiSettings
from services.api.fastroute import FastRoute, Reader, UnsupportedRoute
from services.core.settings import Settings


def _fast_routes() -> list[FastRoute]:
    app = create_app(Settings.from_env({}), ApiSettings())
    return [route for route in _api_routes(app.routes) if isinstance(route, FastRoute)]


def _api_routes(routes: list[Any]) -> Iterator[APIRoute]:
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif hasattr(route, "original_router"):  # an included router
            yield from _api_routes(route.original_router.routes)


FAST = _fast_routes()


def _methods(route: APIRoute) -> set[str]:
    return route.methods or set()


def test_the_hot_routes_are_fast_routes() -> None:
    assert {(method, route.path) for route in FAST for method in _methods(route)} >= {
        ("GET", "/v1/timeline"), ("POST", "/v1/posts"), ("GET", "/v1/posts/{post_id}"),
        ("GET", "/v1/users/{user_id}/posts")}


def test_the_document_shows_what_the_reader_reads() -> None:
    """Every parameter, the security requirement and the body of each FastRoute operation, as documented, are the
    ones its reader takes from a request: neither can change without the other."""
    paths = create_app(Settings.from_env({}), ApiSettings()).openapi()["paths"]
    for route in FAST:
        reader = Reader.of(route)
        for method in _methods(route):
            operation = paths[route.path][method.lower()]
            documented = {(p["in"], p["name"]) for p in operation.get("parameters", [])}
            assert documented == {(p.where, p.alias) for p in reader.params}, (method, route.path)
            assert bool(operation.get("security")) == bool(reader.dependencies), (method, route.path)
            assert ("requestBody" in operation) == (reader.body is not None), (method, route.path)


def test_a_declaration_the_reader_does_not_read_fails_when_the_route_is_built() -> None:
    async def page(limit: int = 20, cursor: str | None = None) -> Response:
        return Response()

    async def listing(ids: list[int]) -> Response:
        return Response()

    async def untyped_reply(limit: int = 20) -> dict[str, int]:
        return {}

    with pytest.raises(UnsupportedRoute, match="ids"):
        FastRoute("/x", listing)
    with pytest.raises(UnsupportedRoute, match="must return a Response"):
        FastRoute("/x", untyped_reply)
    assert [p.name for p in Reader.of(FastRoute("/x", page)).params] == ["limit", "cursor"]


# The same declarations, twice: once on a FastRoute, once on FastAPI's own APIRoute; each endpoint answers its
# arguments, so any difference in what was read, or in an error, shows.

async def _echo(**values: Any) -> Response:
    shown = {name: (value.model_dump() if hasattr(value, "model_dump") else value)
             for name, value in values.items() if not isinstance(value, Request)}
    return Response(orjson.dumps(shown, option=orjson.OPT_SORT_KEYS), media_type="application/json")


def _echo_of(route: APIRoute) -> Any:
    async def echo(**values: Any) -> Response:
        return await _echo(**values)

    echo.__signature__ = inspect.signature(route.endpoint, eval_str=True)  # type: ignore[attr-defined]
    return echo


def _twins() -> FastAPI:
    app = FastAPI()
    for route in FAST:
        for prefix, route_class in (("/fast", FastRoute), ("/slow", APIRoute)):
            app.router.routes.append(route_class(prefix + route.path, _echo_of(route), methods=sorted(_methods(route)),
                                                 status_code=route.status_code))
    problems.install(app)
    return app


TWINS = _twins()
LOOP = asyncio.new_event_loop()


async def _call(method: str, path: str, query: bytes, headers: list[tuple[bytes, bytes]],
                body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode("utf-8", "surrogateescape"), "query_string": query,
             "root_path": "", "headers": [(b"host", b"api"), *headers], "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 80)}
    await TWINS(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], start["headers"], body


_LATIN1 = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=80)
_ASCII = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40)
_NUMBERS = st.one_of(st.integers(-3, 130), st.integers(-(2**65), 2**65), st.sampled_from(["020", "+5", " 5", "5 ",
                                                                                            "1_0", "", "٣", "1e1"]))
_QUERY = st.lists(st.tuples(st.sampled_from(["limit", "cursor", "other"]),
                            st.one_of(_NUMBERS.map(str), st.text(max_size=210))), max_size=4)
_HEADER_VALUES = {
    b"authorization": st.one_of(st.just("Bearer tok_1"), _ASCII.map(lambda t: f"Bearer {t}"), _LATIN1,
                                st.sampled_from(["bearer x", "Bearer", "Basic abc", "Bearer " + "x" * 129])),
    b"walfeed-read-after": st.one_of(st.sampled_from(["0/16B3748", "16/B374D848", "", "x/y", "1/" + "0" * 70]),
                                     _LATIN1),
    b"idempotency-key": st.one_of(_ASCII, st.sampled_from(["", "a b", "é", "k" * 255, "k" * 256]), _LATIN1),
    b"content-type": st.sampled_from(["application/json", "application/json; charset=utf-8", "APPLICATION/JSON",
                                      "text/plain", "application/merge-patch+json", ""]),
}
def _json(value: Any) -> bytes:
    return json.dumps(value).encode()  # orjson refuses integers past 64 bits


_BODIES = st.one_of(
    *[st.text(max_size=30).map(lambda text: orjson.dumps({"body": text}))] * 3,
    st.text(max_size=30).map(lambda text: json.dumps({"body": text}).encode()),  # \u escapes
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["body", "x"]), inner,
                                                                              max_size=2)).map(_json),
    st.binary(max_size=20),
    st.sampled_from([b"", b'{"body": "\\ud800"}', b'{"body": "a", "body": "b"}', b'{"body": "x", "extra": 1}',
                     b'{"body": "\\u0000"}', b'\xef\xbb\xbf{"body": "a"}', '{"body": "a"}'.encode("utf-16"),
                     b'{"body": NaN}', b'{"body": "' + b"a" * 501 + b'"}', b'{"body": " e\xcc\x81 "}',
                     b'{"body": "a"} x', b"[]", b'"body"']),
)
_PATH_VALUES = st.one_of(_NUMBERS.map(str).filter(bool),
                         st.text(st.characters(blacklist_characters="/", min_codepoint=0x21), min_size=1, max_size=25))


@st.composite
def _requests(draw: st.DrawFn) -> tuple[str, str, bytes, list[tuple[bytes, bytes]], bytes]:
    route = draw(st.sampled_from(FAST))
    method = draw(st.sampled_from(sorted(_methods(route))))
    path = route.path
    for name in route.param_convertors:
        path = path.replace("{" + name + "}", draw(_PATH_VALUES))
    usual = {b"authorization": "Bearer tok_1", b"content-type": "application/json"}  # most requests are valid
    headers = [(name, draw(st.one_of(*[st.just(usual[name])] * 3, values) if name in usual else values))
               for name, values in _HEADER_VALUES.items() if draw(st.integers(0, 3)) > (name not in usual)]
    encoded = [(name, value.encode("latin-1")) for name, value in headers]
    return method, path, urlencode(draw(_QUERY)).encode(), encoded, draw(_BODIES) if method == "POST" else b""


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_requests())
def test_a_fast_route_answers_every_request_as_fastapi_does(request: tuple[str, str, bytes, Any, bytes]) -> None:
    method, path, query, headers, body = request
    fast = LOOP.run_until_complete(_call(method, "/fast" + path, query, headers, body))
    slow = LOOP.run_until_complete(_call(method, "/slow" + path, query, headers, body))
    assert fast == slow


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_BODIES, st.one_of(st.none(), _HEADER_VALUES[b"idempotency-key"]))
def test_a_post_with_any_body_is_answered_as_fastapi_does(body: bytes, key: str | None) -> None:
    headers = [(b"authorization", b"Bearer tok_1"), (b"content-type", b"application/json"),
               *([(b"idempotency-key", key.encode("latin-1"))] if key is not None else [])]
    fast = LOOP.run_until_complete(_call("POST", "/fast/v1/posts", b"", headers, body))
    assert fast == LOOP.run_until_complete(_call("POST", "/slow/v1/posts", b"", headers, body))


def _route(method: str, path: str) -> FastRoute:
    return next(route for route in FAST if route.path == path and method in _methods(route))


@pytest.mark.parametrize(("method", "path", "query", "headers", "body"), [
    ("GET", "/v1/timeline", b"limit=20", [(b"authorization", b"Bearer t")], b""),
    ("GET", "/v1/timeline", b"", [(b"authorization", b"Bearer t"), (b"walfeed-read-after", b"0/16B3748")], b""),
    ("POST", "/v1/posts", b"", [(b"authorization", b"Bearer t"), (b"content-type", b"application/json"),
                                (b"idempotency-key", b"k-1")], b'{"body": "hello"}'),
])
def test_plainly_valid_requests_are_read_without_fastapi(method: str, path: str, query: bytes,
                                                         headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    """Else every request would take FastAPI's path after the reader's, and cost more than before."""
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    scope = {"type": "http", "method": method, "path": path, "query_string": query, "headers": headers,
             "path_params": {}}
    values = LOOP.run_until_complete(Reader.of(_route(method, path)).values(Request(scope, receive)))
    assert isinstance(values, dict) and values["token"] == "t"
