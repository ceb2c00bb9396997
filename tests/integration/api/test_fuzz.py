"""Property-based fuzzing of the whole API from its own OpenAPI document (schemathesis): valid and invalid
inputs on every operation, with a real token, a bogus token and none; no 5xx, every response conforms."""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.integration.api.conftest import SignUp

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHECKS = [schemathesis.checks.not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]
EXAMPLES = 25  # per operation and mode: the whole run stays well under two minutes


def test_api_conforms_to_its_openapi_document(api_url: str, client: httpx.Client, signup: SignUp) -> None:
    alice, bob = signup("alice"), signup("bob")
    client.put(f"/v1/following/{bob.id}", headers=alice.auth)
    for i in range(3):
        client.post("/v1/posts", json={"body": f"seed {i}"}, headers=bob.auth)
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json")
    auths = st.sampled_from([alice.auth, {"Authorization": "Bearer forged"}, {}])
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode), auth=auths)
            def check(case: schemathesis.Case, auth: dict[str, str]) -> None:
                headers = {**(case.headers or {}), **auth}
                case.call_and_validate(base_url=api_url, headers=headers, checks=CHECKS)

            try:
                check()
            except Unsatisfiable:
                # no invalid input exists (an operation without parameters or body)
                assert mode is GenerationMode.NEGATIVE, operation.label
