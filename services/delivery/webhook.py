"""HTTP adapter of the webhook channel: sign, check the URL's addresses, POST to a checked address.

The connection pool (httpcore) never resolves a name itself: its network backend connects only to the addresses
ssrf.checked returned for this request, so a DNS answer that changes after the check cannot redirect it. TLS still
verifies the certificate against the URL's host name. Redirects are never followed (httpcore has no such thing).
"""

from __future__ import annotations

import functools
import ssl
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime
from typing import Final

import httpcore

from services.core import signing, ssrf
from services.delivery import payload
from services.delivery.policy import EXCERPT_BYTES, Answer, NoAnswer, Postponed, Refused, Result, excerpt

USER_AGENT: Final = "walfeed-webhooks/1"
_DRAIN_BYTES: Final = 65_536  # a longer answer is not read to its end: its connection is closed instead
# Addresses of a name tried in turn, at most: every address is checked (any non-public one refuses the URL), but a
# name answering 30 addresses that never accept would otherwise hold a thread for 30 connect timeouts. Four covers
# a dual-stack receiver with two addresses of each family; the try's deadline bounds them all anyway.
MAX_ADDRESSES: Final = 4
# What the webhook's owner reads of any try without an HTTP answer: refused, reset, timed out or not HTTP look the
# same, so a receiver URL cannot be used to tell open, closed and filtered ports apart (the log says which).
NO_ANSWER: Final = "no HTTP answer: the connection failed or timed out"


def _left(local: threading.local, timeout: float | None, error: type[Exception]) -> float | None:
    """`timeout`, shortened to what is left of this thread's current try (no deadline set: `timeout`); raises
    `error` when nothing is left."""
    deadline: float | None = getattr(local, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the try's total time is spent")
    return left if timeout is None else min(timeout, left)


class _Deadline(httpcore.NetworkStream):
    """A connection whose every read and write waits no longer than what is left of the current try's total time
    (set per thread: a pooled connection serves one request at a time), so a receiver dripping its answer a byte at
    a time cannot hold a worker thread past WALFEED_DELIVERY_TIMEOUT."""

    def __init__(self, stream: httpcore.NetworkStream, local: threading.local) -> None:
        self._stream = stream
        self._local = local

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(self._local, timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(self._local, timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        tls = self._stream.start_tls(ssl_context, server_hostname,
                                     _left(self._local, timeout, httpcore.ConnectTimeout))
        return _Deadline(tls, self._local)

    def get_extra_info(self, info: str) -> object:
        return self._stream.get_extra_info(info)


class _PinnedBackend(httpcore.SyncBackend):
    """Connects this thread's current request to its checked addresses, in order, whatever host it is asked for,
    each within what is left of the try's total time; its connections keep to that time too (_Deadline)."""

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
            left = _left(self._local, timeout, httpcore.ConnectTimeout)
            try:
                stream = super().connect_tcp(str(address), port, left, local_address, socket_options)
                return _Deadline(stream, self._local)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        assert error is not None
        raise error


class _ResolveTimeout(Exception):
    """The receiver's name did not resolve within what was left of the try's total time; `queued`: its lookup had
    not even started (the lookup threads were all busy with other names)."""

    def __init__(self, queued: bool) -> None:
        super().__init__()
        self.queued = queued


class WebhookSender:
    """One try = one deadline (WALFEED_DELIVERY_TIMEOUT from its start): resolving the name, connecting to at most
    MAX_ADDRESSES of its addresses (each within WALFEED_DELIVERY_CONNECT_TIMEOUT and what is left), the request and
    its answer. A resolver that hangs holds one of its own threads (as many as the connections), not the try."""

    def __init__(self, policy: ssrf.Policy, connect_timeout: float, timeout: float, max_connections: int,
                 resolver: ssrf.Resolver = ssrf.resolve) -> None:
        self._policy = policy
        self._resolver = resolver
        self._connect_timeout = connect_timeout
        self._total = timeout
        self._backend = _PinnedBackend()
        self._pool = httpcore.ConnectionPool(max_connections=max_connections, keepalive_expiry=30.0,
                                             network_backend=self._backend)
        self._lookups = ThreadPoolExecutor(max_connections, thread_name_prefix="webhook-dns")
        self._running: dict[tuple[str, int], Future[list[ssrf.IPAddress]]] = {}  # one lookup of a name at a time
        self._running_lock = threading.Lock()

    def close(self) -> None:
        self._pool.close()
        self._lookups.shutdown(wait=False, cancel_futures=True)

    def send(self, delivery: payload.Delivery, now: datetime) -> Result | Postponed:
        deadline = time.monotonic() + self._total
        try:
            target, addresses = ssrf.checked(delivery.url or "", self._policy,
                                             functools.partial(self._resolve, deadline=deadline))
            secrets = signing.active_secrets(delivery.secret or "", delivery.previous_secret,
                                             delivery.previous_secret_until, now)
            body = payload.webhook_body(delivery)
            headers = signing.headers(str(delivery.id), int(now.timestamp()), body, secrets)
        except ssrf.ResolveFailed as exc:  # a resolver's or name server's failure, not the receiver's answer
            return NoAnswer(NO_ANSWER, exc.detail)
        except (ssrf.UrlRefused, signing.InvalidSecret) as exc:
            return Refused(str(exc), getattr(exc, "detail", None))
        except _ResolveTimeout as exc:
            if exc.queued:  # the lookup never started: our threads were busy with other names, not this receiver
                return Postponed("the sender's name lookups were busy")
            return NoAnswer(NO_ANSWER, "timeout resolving the host")
        headers.update({"Host": target.host_header, "Content-Type": "application/json", "User-Agent": USER_AGENT})
        url = httpcore.URL(scheme=target.scheme, host=target.host, port=target.port, target=target.target)
        self._backend.pin(addresses[:MAX_ADDRESSES], deadline)
        left = max(0.001, deadline - time.monotonic())
        timeouts = {"connect": self._connect_timeout, "read": left, "write": left, "pool": left}
        try:
            with self._pool.stream("POST", url, headers=list(headers.items()), content=body,
                                   extensions={"timeout": timeouts}) as response:
                head = _read_head(response)
                retry_after = next((v.decode("latin-1") for k, v in response.headers
                                    if k.lower() == b"retry-after"), None)
                return Answer(response.status, retry_after, excerpt(head, EXCERPT_BYTES))
        except httpcore.TimeoutException as exc:
            return NoAnswer(NO_ANSWER, f"timeout: {type(exc).__name__}")
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
            return NoAnswer(NO_ANSWER, f"{type(exc).__name__}: {exc}"[:500])
        finally:
            self._backend.pin((), None)

    def _resolve(self, host: str, port: int, deadline: float) -> list[ssrf.IPAddress]:
        """The resolver's answer, on a lookup thread, waited for until `deadline` at most. The tries of one name
        share its lookup while it runs: a name whose servers never answer holds one lookup thread, not one per
        try, and the other receivers' lookups are not queued behind it."""
        key = (host, port)
        with self._running_lock:
            lookup, started = self._running.get(key), False
            if lookup is None:
                lookup, started = self._lookups.submit(lambda: list(self._resolver(host, port))), True
                self._running[key] = lookup
        if started:  # outside the lock: a lookup done already runs the callback here, at once
            lookup.add_done_callback(functools.partial(self._finished, key))
        try:
            return lookup.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:  # its thread finishes on its own; the next try of the name shares it
            raise _ResolveTimeout(queued=not lookup.running() and not lookup.done()) from None

    def _finished(self, key: tuple[str, int], lookup: Future[list[ssrf.IPAddress]]) -> None:
        with self._running_lock:
            if self._running.get(key) is lookup:
                del self._running[key]


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
