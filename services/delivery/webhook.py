"""HTTP adapter of the webhook channel: sign, check the URL's addresses, POST to a checked address.

The connection pool (httpcore) never resolves a name itself: its network backend connects only to the addresses
ssrf.checked returned for this request, so a DNS answer that changes after the check cannot redirect it. TLS still
verifies the certificate against the URL's host name. Redirects are never followed (httpcore has no such thing).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Final

import httpcore

from services.delivery import payload, signing, ssrf
from services.delivery.policy import Answer, NoAnswer, Refused, Result, excerpt

USER_AGENT: Final = "walfeed-webhooks/1"
EXCERPT_BYTES: Final = 4096  # the response excerpt stored on the delivery
_DRAIN_BYTES: Final = 65_536  # a longer answer is not read to its end: its connection is closed instead


class _PinnedBackend(httpcore.SyncBackend):
    """Connects this thread's current request to its checked addresses, in order, whatever host it is asked for."""

    def __init__(self) -> None:
        self._local = threading.local()

    def pin(self, addresses: tuple[ssrf.IPAddress, ...]) -> None:
        self._local.addresses = addresses

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None) -> httpcore.NetworkStream:
        addresses: tuple[ssrf.IPAddress, ...] = getattr(self._local, "addresses", ())
        if not addresses:
            raise httpcore.ConnectError(f"no checked address for {host}")
        error: Exception | None = None
        for address in addresses:
            try:
                return super().connect_tcp(str(address), port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        assert error is not None
        raise error


class WebhookSender:
    def __init__(self, policy: ssrf.Policy, connect_timeout: float, timeout: float, max_connections: int,
                 resolver: ssrf.Resolver = ssrf.resolve) -> None:
        self._policy = policy
        self._resolver = resolver
        self._timeouts = {"connect": connect_timeout, "read": timeout, "write": timeout, "pool": timeout}
        self._total = timeout
        self._backend = _PinnedBackend()
        self._pool = httpcore.ConnectionPool(max_connections=max_connections, keepalive_expiry=30.0,
                                             network_backend=self._backend)

    def close(self) -> None:
        self._pool.close()

    def send(self, delivery: payload.Delivery, now: datetime) -> Result:
        try:
            target, addresses = ssrf.checked(delivery.url or "", self._policy, self._resolver)
            secrets = signing.active_secrets(delivery.secret or "", delivery.previous_secret,
                                             delivery.previous_secret_until, now)
            body = payload.webhook_body(delivery)
            headers = signing.headers(str(delivery.id), int(now.timestamp()), body, secrets)
        except (ssrf.UrlRefused, signing.InvalidSecret) as exc:
            return Refused(str(exc))
        headers.update({"Host": target.host_header, "Content-Type": "application/json", "User-Agent": USER_AGENT})
        url = httpcore.URL(scheme=target.scheme, host=target.host, port=target.port, target=target.target)
        self._backend.pin(addresses)
        deadline = time.monotonic() + self._total
        try:
            with self._pool.stream("POST", url, headers=list(headers.items()), content=body,
                                   extensions={"timeout": self._timeouts}) as response:
                head = _read_head(response, deadline)
                retry_after = next((v.decode("latin-1") for k, v in response.headers
                                    if k.lower() == b"retry-after"), None)
                return Answer(response.status, retry_after, excerpt(head, EXCERPT_BYTES))
        except httpcore.TimeoutException as exc:
            return NoAnswer(f"timeout: {type(exc).__name__}")
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
            return NoAnswer(f"{type(exc).__name__}: {exc}"[:500])
        finally:
            self._backend.pin(())


def _read_head(response: httpcore.Response, deadline: float) -> bytes:
    """The start of the body: read to its end when short (the connection can be reused), else up to a limit."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_stream():
        chunks.append(chunk)
        size += len(chunk)
        if size >= _DRAIN_BYTES or time.monotonic() > deadline:
            break
    return b"".join(chunks)[:EXCERPT_BYTES]
