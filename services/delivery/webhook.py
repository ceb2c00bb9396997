"""HTTP adapter of the webhook channel: sign, check the URL's addresses, POST to a checked address.

The connection pool (httpcore) never resolves a name itself: its network backend connects only to the addresses
ssrf.checked returned for this request, so a DNS answer that changes after the check cannot redirect it. TLS still
verifies the certificate against the URL's host name. Redirects are never followed (httpcore has no such thing).
"""

from __future__ import annotations

import ssl
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


class _Deadline(httpcore.NetworkStream):
    """A connection whose every read and write waits no longer than what is left of the current request's total
    time (set per thread: a pooled connection serves one request at a time), so a receiver dripping its answer a
    byte at a time cannot hold a worker thread past WALFEED_DELIVERY_TIMEOUT."""

    def __init__(self, stream: httpcore.NetworkStream, local: threading.local) -> None:
        self._stream = stream
        self._local = local

    def _left(self, timeout: float | None, error: type[Exception]) -> float | None:
        deadline: float | None = getattr(self._local, "deadline", None)
        if deadline is None:
            return timeout
        left = deadline - time.monotonic()
        if left <= 0:
            raise error("the request's total time is spent")
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, self._left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, self._left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        tls = self._stream.start_tls(ssl_context, server_hostname, self._left(timeout, httpcore.ConnectTimeout))
        return _Deadline(tls, self._local)

    def get_extra_info(self, info: str) -> object:
        return self._stream.get_extra_info(info)


class _PinnedBackend(httpcore.SyncBackend):
    """Connects this thread's current request to its checked addresses, in order, whatever host it is asked for;
    its connections keep to the request's total time (_Deadline)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def pin(self, addresses: tuple[ssrf.IPAddress, ...], deadline: float | None) -> None:
        self._local.addresses = addresses
        self._local.deadline = deadline

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None) -> httpcore.NetworkStream:
        addresses: tuple[ssrf.IPAddress, ...] = getattr(self._local, "addresses", ())
        if not addresses:
            raise httpcore.ConnectError(f"no checked address for {host}")
        error: Exception | None = None
        for address in addresses:
            try:
                stream = super().connect_tcp(str(address), port, timeout, local_address, socket_options)
                return _Deadline(stream, self._local)
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
        deadline = time.monotonic() + self._total
        self._backend.pin(addresses, deadline)
        try:
            with self._pool.stream("POST", url, headers=list(headers.items()), content=body,
                                   extensions={"timeout": self._timeouts}) as response:
                head = _read_head(response)
                retry_after = next((v.decode("latin-1") for k, v in response.headers
                                    if k.lower() == b"retry-after"), None)
                return Answer(response.status, retry_after, excerpt(head, EXCERPT_BYTES))
        except httpcore.TimeoutException as exc:
            return NoAnswer(f"timeout: {type(exc).__name__}")
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
            return NoAnswer(f"{type(exc).__name__}: {exc}"[:500])
        finally:
            self._backend.pin((), None)


def _read_head(response: httpcore.Response) -> bytes:
    """The start of the body: read to its end when short (the connection can be reused), else up to a limit."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_stream():
        chunks.append(chunk)
        size += len(chunk)
        if size >= _DRAIN_BYTES:
            break
    return b"".join(chunks)[:EXCERPT_BYTES]
