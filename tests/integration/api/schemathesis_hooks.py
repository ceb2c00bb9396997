"""Hooks of the schemathesis run in tests/integration/api/test_fuzz.py (schemathesis.toml names this module).

- The bearer token of a user signed up for the run; schemathesis signs up again on a 401 and replays the request,
  so an operation that rotates or revokes the token does not leave the rest of the run unauthenticated.
- A POST /v1/posts whose Idempotency-Key was used before answers the original post again, also when it was
  deleted since (docs/api.md): a 404 for that post is then right, not "created resource not found" (ST302).
"""

from __future__ import annotations

import os
import secrets
from typing import Any

import httpx
import schemathesis
from requests.structures import CaseInsensitiveDict
from schemathesis.core.failures import Failure

API_URL_VARIABLE = "WALFEED_FUZZ_API_URL"
_replayed: set[int] = set()  # ids of posts answered by an Idempotency-Key replay


@schemathesis.auth()
class SignedUp:
    def get(self, case: schemathesis.Case[Any], ctx: schemathesis.AuthContext) -> str:
        reply = httpx.post(f"{os.environ[API_URL_VARIABLE]}/v1/users", json={"handle": f"fuzz_{secrets.token_hex(8)}"})
        reply.raise_for_status()
        return str(reply.json()["token"])

    def set(self, case: schemathesis.Case[Any], data: str, ctx: schemathesis.AuthContext) -> None:
        case.headers = CaseInsensitiveDict({**case.headers, "Authorization": f"Bearer {data}"})


@schemathesis.hook
def after_call(ctx: schemathesis.HookContext, case: schemathesis.Case[Any], response: schemathesis.Response) -> None:
    if "idempotent-replayed" in {name.lower() for name in response.headers}:
        _replayed.add(int(response.json()["id"]))


@schemathesis.hook
def filter_failure(ctx: schemathesis.HookContext, failure: Failure, case: schemathesis.Case[Any],
                   response: schemathesis.Response) -> bool:
    post_id = (case.path_parameters or {}).get("post_id")
    return not (failure.code == "ST302" and isinstance(post_id, int) and post_id in _replayed)
