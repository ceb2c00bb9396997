"""The local webhook receiver of bench/notify_latency.py, run in a process of its own (uvicorn, one event loop) so
that neither its work nor the bench's threads wait for the other's GIL:

    python -m uvicorn --factory bench.lib.webhook_receiver:create --port P

Every POST is verified with the Standard Webhooks reference library (`standardwebhooks`, the `test` extra) against
the secret in WALFEED_BENCH_WEBHOOK_SECRET, answered 204, and recorded as one line (bench/lib/mentions.py Receipt)
appended to the file WALFEED_BENCH_RECEIPTS, flushed at once so the bench can follow it while it runs. The time is
taken when the request's body has arrived, before verifying it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from bench.lib.mentions import Receipt

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def _names(body: bytes) -> tuple[int | None, int | None]:
    """(post id, recipient id) of a mention's webhook body; (None, None) for anything else."""
    try:
        data = json.loads(body)["data"]
        return int(data["post"]["id"]), int(data["recipient_id"])
    except (ValueError, KeyError, TypeError):
        return None, None


def create() -> App:
    webhook = Webhook(os.environ["WALFEED_BENCH_WEBHOOK_SECRET"])
    out = open(os.environ["WALFEED_BENCH_RECEIPTS"], "a", buffering=1)  # noqa: SIM115 - open for the process's life

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        at, body = time.monotonic(), b"".join(chunks)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            webhook.verify(body, headers)
            verified = True
        except WebhookVerificationError:
            verified = False
        post_id, recipient_id = _names(body)
        out.write(Receipt(at, headers.get("webhook-id", "-"), post_id, recipient_id, verified).line() + "\n")
        await send({"type": "http.response.start", "status": 204 if verified else 400, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    return app
