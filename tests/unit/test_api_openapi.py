"""The OpenAPI document: every operation documents its errors as problem documents; auth is declared."""

from typing import Any

from services.api.app import create_app
from services.api.config import ApiSettings
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
    public = {("post", "/v1/users"), ("get", "/healthz"), ("get", "/readyz"), ("get", "/metrics")}
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
