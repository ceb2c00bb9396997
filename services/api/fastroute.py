"""Routes whose parameters are read without FastAPI's dependency solver when the request is plainly valid
(docs/adr/0151).

Per request FastAPI walks a route's dependency tree: a sub-dependency's own solve, an empty `Response`, cache keys,
alias lists and type checks for each parameter. On the hottest routes that was a sixth of the api's own CPU. A
`FastRoute` keeps its declaration as it is: FastAPI documents it (the OpenAPI document is unchanged) and FastAPI's
own handler still answers every request this one does not. Once, when the route is built, it reads the declaration
into a `Reader` for the shapes it knows; per request the reader takes each value from where FastAPI takes it and
validates it with the same pydantic field FastAPI would (`ModelField.validate`), in FastAPI's order: the JSON body
read, then the dependencies on the request alone (the bearer check, whose 401 comes first as before), then path,
query and header parameters, then the body's model. Anything else (a value missing, invalid or of another content
type) and the request goes to FastAPI's handler from the start, so every 400 and 422 is FastAPI's own. A declaration
the reader does not know fails when the route is built, naming the parameter.

Not read here, so not allowed on a FastRoute: cookies, form bodies, several bodies, dependencies with parameters of
their own or with yield, `Response`/`BackgroundTasks` parameters, a route that does not return a `Response`, and
FastAPI's own body size limit (walfeed limits bodies in middleware.Edge); FastAPI's `dependency_overrides` are not
consulted (walfeed sets none) and its native telemetry (`FastAPI(telemetry=...)`, not configured) sees no solve.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from json import JSONDecodeError
from typing import Any, Final

from fastapi import params
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.middleware.body_limit import MAX_BODY_SIZE_SCOPE_KEY
from starlette.requests import Request
from starlette.responses import Response

# The parameter types read here: each arrives as one string, or not at all.
SCALARS: Final = (int, str, int | None, str | None)
_SOURCES: Final = {params.Path: "path", params.Query: "query", params.Header: "header"}
_UNREAD: Final = object()  # what a reader returns when FastAPI must answer the request


class UnsupportedRoute(TypeError):
    """A FastRoute declares something its reader does not read."""


@dataclass(frozen=True, slots=True)
class Param:
    """One path, query or header parameter: the endpoint's argument `name`, the request's key `alias`."""

    name: str
    alias: str
    where: str  # "path", "query" or "header", as FastAPI's `in`
    field: Any  # FastAPI's ModelField: its `validate` is FastAPI's for this parameter
    required: bool
    default: Any


@dataclass(frozen=True, slots=True)
class Reader:
    """The values of a route's endpoint arguments from a request, or `_UNREAD` when FastAPI must answer it."""

    request_name: str | None
    dependencies: tuple[tuple[str, str, Callable[..., Awaitable[Any]]], ...]  # (argument, its request argument, call)
    params: tuple[Param, ...]
    body: tuple[str, Any] | None  # (argument, ModelField) of a JSON body model

    @classmethod
    def of(cls, route: APIRoute) -> Reader:
        """Raises UnsupportedRoute, naming what it does not read."""
        where = f"{sorted(route.methods or ())} {route.path}"
        dependant = route.dependant
        _only_request(dependant, where)
        if dependant.cookie_params:
            raise UnsupportedRoute(f"{where}: cookie parameters are not read by a FastRoute")
        if route.max_body_size is not None:
            raise UnsupportedRoute(f"{where}: FastAPI's body size limit is not applied by a FastRoute")
        if not _returns_response(route.endpoint):
            raise UnsupportedRoute(f"{where}: the endpoint must return a Response (nothing is serialised here)")
        dependencies = []
        for sub in dependant.dependencies:
            if sub.name is None or sub.call is None:
                raise UnsupportedRoute(f"{where}: a dependency without a parameter is not read by a FastRoute")
            _only_request(sub, f"{where}, {sub.name}")
            if (sub.path_params or sub.query_params or sub.header_params or sub.cookie_params or sub.body_params
                    or sub.dependencies or sub.request_param_name is None or not _is_async(sub.call)):
                raise UnsupportedRoute(f"{where}: the dependency {sub.name} must be an async callable taking the "
                                       "request alone")
            dependencies.append((sub.name, sub.request_param_name, sub.call))
        fields = [(field, where_from) for kind, where_from in (("path_params", "path"), ("query_params", "query"),
                                                               ("header_params", "header"))
                  for field in getattr(dependant, kind)]
        return cls(dependant.request_param_name, tuple(dependencies),
                   tuple(_param(field, source, where) for field, source in fields), _body(dependant, where))

    async def values(self, request: Request) -> Any:
        """The endpoint's keyword arguments, or `_UNREAD`. Raises what the dependencies raise (the 401), and the
        body's read errors as FastAPI does."""
        values: dict[str, Any] = {}
        body: Any = None
        if self.body is not None:
            body = await _json_body(request)
            if body is _UNREAD:
                return _UNREAD
        for name, argument, call in self.dependencies:
            values[name] = await call(**{argument: request})
        for param in self.params:
            if param.where == "query":
                raw = request.query_params.get(param.alias)
            elif param.where == "header":
                raw = request.headers.get(param.alias)
            else:
                raw = request.path_params.get(param.alias)
            if raw is None:
                if param.required:
                    return _UNREAD
                values[param.name] = param.default
                continue
            value, errors = param.field.validate(raw, values, loc=(param.where, param.alias))
            if errors:
                return _UNREAD
            values[param.name] = value
        if self.body is not None:
            name, field = self.body
            value, errors = field.validate(body, values, loc=("body",))
            if errors:
                return _UNREAD
            values[name] = value
        if self.request_name is not None:
            values[self.request_name] = request
        return values


class FastRoute(APIRoute):
    """An APIRoute (same declaration, same document) whose handler reads plainly valid requests itself."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        fastapi_handler = super().get_route_handler()
        reader = Reader.of(self)
        endpoint = self.endpoint

        async def handler(request: Request) -> Response:
            if MAX_BODY_SIZE_SCOPE_KEY in request.scope:  # a body limit of FastAPI's: its handler applies it
                return await fastapi_handler(request)
            values = await reader.values(request)
            if values is _UNREAD:
                return await fastapi_handler(request)
            response: Response = await endpoint(**values)
            return response

        return handler


def _param(field: Any, where_from: str, where: str) -> Param:
    info = field.field_info
    label = f"{where}, {where_from} parameter {field.name}"
    if type(info) not in _SOURCES or _SOURCES[type(info)] != where_from:
        raise UnsupportedRoute(f"{label}: declared as {type(info).__name__}")
    if info.annotation not in SCALARS:
        raise UnsupportedRoute(f"{label}: of type {info.annotation}, not one of {SCALARS}")
    alias = getattr(field, "validation_alias", None) or field.alias  # the request's key, as FastAPI looks it up
    config = field.config or {}
    if (not isinstance(alias, str) or info.validation_alias not in (None, alias) or info.validate_default
            or config.get("validate_by_alias") is False or config.get("validate_by_name")
            or config.get("populate_by_name")):
        raise UnsupportedRoute(f"{label}: alias choices, names besides the alias and validated defaults are not "
                               "read by a FastRoute")
    required = info.is_required()
    default = None if required else info.get_default(call_default_factory=True)
    if not isinstance(default, int | str | None):  # FastAPI copies a default; these need no copy
        raise UnsupportedRoute(f"{label}: a default of {type(default).__name__}")
    return Param(field.name, alias, where_from, field, required, default)


def _body(dependant: Dependant, where: str) -> tuple[str, Any] | None:
    if not dependant.body_params:
        return None
    if len(dependant.body_params) > 1:
        raise UnsupportedRoute(f"{where}: several body parameters are not read by a FastRoute")
    field = dependant.body_params[0]
    info = field.field_info
    model = info.annotation
    if (type(info) is not params.Body or getattr(info, "embed", False) or not inspect.isclass(model)
            or not issubclass(model, BaseModel)):
        raise UnsupportedRoute(f"{where}: the body {field.name} must be one JSON model, not embedded")
    return field.name, field


async def _json_body(request: Request) -> Any:
    """The JSON body as FastAPI decodes it, or `_UNREAD` when FastAPI should look at it (not application/json,
    empty, not JSON). A failed read is answered as FastAPI answers it."""
    if request.headers.get("content-type") != "application/json":
        return _UNREAD
    try:
        if not await request.body():
            return _UNREAD
        return await request.json()  # json.loads of the body, as FastAPI's; remembered for FastAPI's handler
    except JSONDecodeError:
        return _UNREAD
    except HTTPException:
        raise
    except Exception as exc:
        raise HTTPException(status_code=400, detail="There was an error parsing the body") from exc


def _only_request(dependant: Dependant, where: str) -> None:
    others = {"websocket": dependant.websocket_param_name, "connection": dependant.http_connection_param_name,
              "response": dependant.response_param_name, "background tasks": dependant.background_tasks_param_name,
              "security scopes": dependant.security_scopes_param_name}
    named = [kind for kind, name in others.items() if name is not None]
    if named:
        raise UnsupportedRoute(f"{where}: {', '.join(named)} parameters are not read by a FastRoute")


def _is_async(call: Callable[..., Any]) -> bool:
    function = call if inspect.isfunction(call) or inspect.ismethod(call) else getattr(call, "__call__", None)  # noqa: B004
    return inspect.iscoroutinefunction(function) and not inspect.isasyncgenfunction(function)


def _returns_response(endpoint: Callable[..., Any]) -> bool:
    returned = inspect.signature(endpoint, eval_str=True).return_annotation
    return inspect.isclass(returned) and issubclass(returned, Response)
