"""The delivery worker's parts against real services: the webhook sender's pinned connections, and the consumer
going on after an adapter raised (the sender handed in by the test, as main.py hands in the real one)."""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel as Channel
from psycopg_pool import ConnectionPool

from services.core import events as ev
from services.core import ssrf
from services.core.db import make_pool
from services.core.topology import Topology
from services.delivery import broker, policy, processing, webhook
from services.delivery.main import session as delivery_session
from services.delivery.payload import Delivery
from services.delivery.store import Store
from services.delivery.webhook import WebhookSender
from testkit.infra import Infra
from testkit.waiting import eventually
from tests.integration.delivery import world
from tests.integration.delivery.conftest import dead_letters
from tests.integration.delivery.receiver import Receiver, Reply

pytestmark = pytest.mark.integration

LOCAL = ssrf.Policy(ssrf.parse_networks("127.0.0.0/8"), allow_http=True)
RETRY = policy.Settings(max_attempts=3, base=0.2, cap=1.0, retry_after_max=10.0, disable_after=1e9)


def _delivery(url: str, secret: str) -> Delivery:
    return Delivery(id=77, channel="webhook", status="PENDING", recipient_id=1, created_at=datetime.now(UTC),
                    webhook_id=1, url=url, secret=secret)


def test_the_sender_connects_to_the_checked_address_and_never_resolves_again(receiver: Receiver) -> None:
    answers = iter([[ipaddress.ip_address("127.0.0.1")], [ipaddress.ip_address("10.1.2.3")]])
    sender = WebhookSender(LOCAL, 1.0, 2.0, 2, resolver=lambda host, port: next(answers))
    receiver.script("/pinned", Reply(200))
    url = f"http://hooks.invalid:{receiver.port}/pinned"  # .invalid never resolves: only the checked address works
    try:
        assert sender.send(_delivery(url, receiver.secrets[0]), datetime.now(UTC)) == policy.Answer(
            200, None, '{"ok": true}')
        (request,) = receiver.to("/pinned")
        assert request.headers["host"] == f"hooks.invalid:{receiver.port}" and request.verified_by == (0,)
        refused = sender.send(_delivery(url, receiver.secrets[0]), datetime.now(UTC))  # the name now answers 10.x
        assert isinstance(refused, policy.Refused) and "10.1.2.3" in (refused.detail or "")
        assert refused.reason == ssrf.NOT_PUBLIC  # what the webhook's owner reads names no address
        assert len(receiver.to("/pinned")) == 1
    finally:
        sender.close()


def test_redirects_are_not_followed(receiver: Receiver) -> None:
    url = receiver.script("/moved", Reply(302, {"Location": receiver.url("/elsewhere")}))
    sender = WebhookSender(LOCAL, 1.0, 2.0, 2)
    try:
        result = sender.send(_delivery(url, receiver.secrets[0]), datetime.now(UTC))
    finally:
        sender.close()
    assert isinstance(result, policy.Answer) and result.code == 302
    assert policy.decide(result, 1, RETRY, datetime.now(UTC)).status == policy.DEAD
    assert receiver.to("/elsewhere") == []


@pytest.fixture
def dripping() -> Iterator[int]:
    """A receiver that reads the request, then answers one byte every 0.1 s, forever: a slowloris."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = server.accept()
            with conn:
                conn.recv(65536)
                for byte in itertools.cycle(b"HTTP/1.1 200 OK\r\nx-padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"):
                    if stop.wait(0.1):
                        return
                    conn.sendall(bytes([byte]))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    server.close()
    thread.join(5)


def test_a_receiver_dripping_its_answer_is_cut_off_at_the_total_timeout(dripping: int) -> None:
    sender = WebhookSender(LOCAL, 1.0, 1.0, 2)
    started = time.monotonic()
    try:
        result = sender.send(_delivery(f"http://127.0.0.1:{dripping}/slow", "whsec_AAAA"), datetime.now(UTC))
    finally:
        sender.close()
    assert isinstance(result, policy.NoAnswer) and (result.detail or "").startswith("timeout")
    assert time.monotonic() - started < 1.0 + 0.5  # each byte came within the read timeout: only the total ends it


def test_a_refused_connection_is_a_retriable_network_error() -> None:
    sender = WebhookSender(LOCAL, 1.0, 2.0, 2)
    try:
        result = sender.send(_delivery("http://127.0.0.1:9/", "whsec_AAAA"), datetime.now(UTC))
    finally:
        sender.close()
    assert isinstance(result, policy.NoAnswer) and "refused" in (result.detail or "")


@pytest.fixture
def silent() -> Iterator[tuple[list[ipaddress.IPv4Address], int]]:
    """30 loopback addresses (127.0.0.2 ...) listening on one port, each with its accept queue full, so a
    connection to any of them is never accepted (its SYN is dropped): a name whose 30 addresses do not answer."""
    listeners: list[socket.socket] = []
    fillers: list[socket.socket] = []
    port = 0
    try:
        for k in range(2, 32):
            server = socket.socket()
            server.bind((f"127.0.0.{k}", port))
            server.listen(0)
            port = server.getsockname()[1]
            listeners.append(server)
            for _ in range(2):  # one takes the queue's only place, the next waits for it
                filler = socket.socket()
                filler.setblocking(False)
                filler.connect_ex((f"127.0.0.{k}", port))
                fillers.append(filler)
        yield [ipaddress.IPv4Address(f"127.0.0.{k}") for k in range(2, 32)], port
    finally:
        for sock in fillers + listeners:
            sock.close()


def _send_to_silent(silent: tuple[list[ipaddress.IPv4Address], int], connect_timeout: float,
                    timeout: float) -> tuple[policy.Result | policy.Postponed, float]:
    """One try to a name resolving to the silent addresses: its result and how long it took."""
    addresses, port = silent
    sender = WebhookSender(LOCAL, connect_timeout, timeout, 2, resolver=lambda host, port: addresses)
    started = time.monotonic()
    try:
        result = sender.send(_delivery(f"http://many.invalid:{port}/", "whsec_AAAA"), datetime.now(UTC))
    finally:
        sender.close()
    return result, time.monotonic() - started


def test_a_name_with_many_silent_addresses_ends_within_the_total_timeout(
        silent: tuple[list[ipaddress.IPv4Address], int]) -> None:
    result, seconds = _send_to_silent(silent, connect_timeout=1.0, timeout=2.0)
    assert isinstance(result, policy.NoAnswer) and (result.detail or "").startswith("timeout"), result
    assert seconds < 2.0 + 0.5  # was 30 addresses x 1 s


def test_a_closed_port_and_a_silent_one_read_the_same_to_the_webhooks_owner(
        silent: tuple[list[ipaddress.IPv4Address], int]) -> None:
    timed_out, _ = _send_to_silent(silent, connect_timeout=0.3, timeout=1.0)
    sender = WebhookSender(LOCAL, 0.3, 1.0, 2)
    try:
        closed = sender.send(_delivery("http://127.0.0.1:9/", "whsec_AAAA"), datetime.now(UTC))
    finally:
        sender.close()
    assert isinstance(timed_out, policy.NoAnswer) and isinstance(closed, policy.NoAnswer)
    assert timed_out.error == closed.error == webhook.NO_ANSWER  # stored as last_error: the same words
    assert "refused" in (closed.detail or "") and "timeout" in (timed_out.detail or "")  # the log tells them apart


def test_a_name_with_many_silent_addresses_tries_only_the_first_few(
        silent: tuple[list[ipaddress.IPv4Address], int]) -> None:
    result, seconds = _send_to_silent(silent, connect_timeout=0.2, timeout=60.0)
    assert isinstance(result, policy.NoAnswer), result
    assert seconds < webhook.MAX_ADDRESSES * 0.2 + 0.5  # not 30 x 0.2 s


def test_a_resolver_that_hangs_ends_the_try_within_the_total_timeout() -> None:
    release = threading.Event()

    def hanging(host: str, port: int) -> list[ssrf.IPAddress]:
        release.wait(30)
        return [ipaddress.ip_address("127.0.0.1")]

    sender = WebhookSender(LOCAL, 1.0, 1.0, 2, resolver=hanging)
    started = time.monotonic()
    try:
        result = sender.send(_delivery("http://slow-dns.invalid/", "whsec_AAAA"), datetime.now(UTC))
    finally:
        release.set()
        sender.close()
    assert result == policy.NoAnswer(webhook.NO_ANSWER) and result.detail == "timeout resolving the host"
    assert time.monotonic() - started < 1.0 + 0.5


@pytest.mark.parametrize("code", [socket.EAI_AGAIN, socket.EAI_FAIL])
def test_a_name_that_cannot_be_resolved_for_now_is_tried_again_and_one_that_does_not_exist_is_not(
        code: int, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(host: str, *_: Any, **__: Any) -> Any:
        raise socket.gaierror(code if host == "flaky.example" else socket.EAI_NONAME, "resolver says no")

    monkeypatch.setattr(socket, "getaddrinfo", failing)  # the system resolver's answers, as ssrf.resolve gets them
    sender = WebhookSender(LOCAL, 1.0, 1.0, 2)
    try:
        flaky = sender.send(_delivery("http://flaky.example/", "whsec_AAAA"), datetime.now(UTC))
        gone = sender.send(_delivery("http://gone.example/", "whsec_AAAA"), datetime.now(UTC))
    finally:
        sender.close()
    assert flaky == policy.NoAnswer(webhook.NO_ANSWER) and "does not resolve" in (flaky.detail or "")
    assert policy.decide(flaky, 1, RETRY, datetime.now(UTC)).status == "RETRYING"
    assert isinstance(gone, policy.Refused)
    assert policy.decide(gone, 1, RETRY, datetime.now(UTC)).status == "DEAD"


def test_a_name_whose_servers_never_answer_holds_one_lookup_thread_not_every_one(receiver: Receiver) -> None:
    """Tries of one hostile name at once share its lookup: another receiver's name, tried meanwhile, still resolves
    on the second of the sender's two lookup threads and gets its answer."""
    release = threading.Event()

    def resolver(host: str, port: int) -> list[ssrf.IPAddress]:
        if host == "silent.example":
            release.wait(30)
        return [ipaddress.ip_address("127.0.0.1")]

    sender = WebhookSender(LOCAL, 1.0, 2.0, 2, resolver=resolver)
    receiver.script("/innocent", Reply(200))
    hostile = [threading.Thread(target=sender.send, args=(_delivery("http://silent.example/", "whsec_AAAA"),
                                                          datetime.now(UTC))) for _ in range(4)]
    try:
        for thread in hostile:
            thread.start()
        innocent = sender.send(_delivery(f"http://innocent.example:{receiver.port}/innocent", receiver.secrets[0]),
                               datetime.now(UTC))
        assert innocent == policy.Answer(200, None, '{"ok": true}')
    finally:
        release.set()
        for thread in hostile:
            thread.join(10)
        sender.close()


def test_a_try_whose_lookup_waited_behind_other_names_is_postponed_not_failed() -> None:
    """With one lookup thread held by a name that never answers, another name's lookup never starts within its
    try's deadline: that is walfeed's congestion, not the receiver's failure."""
    release, entered = threading.Event(), threading.Event()

    def resolver(host: str, port: int) -> list[ssrf.IPAddress]:
        if host == "silent.example":
            entered.set()
            release.wait(30)
        return [ipaddress.ip_address("127.0.0.1")]

    sender = WebhookSender(LOCAL, 1.0, 1.0, 1, resolver=resolver)
    hostile = threading.Thread(target=sender.send, args=(_delivery("http://silent.example/", "whsec_AAAA"),
                                                         datetime.now(UTC)))
    try:
        hostile.start()
        eventually(entered.is_set, timeout=5, what="the silent name's lookup holding the only thread")
        queued = sender.send(_delivery("http://innocent.example/", "whsec_AAAA"), datetime.now(UTC))
        assert queued == policy.Postponed("the sender's name lookups were busy")
    finally:
        release.set()
        hostile.join(10)
        sender.close()


class _Raising:
    """The real sender, except that it raises (a bug) for one delivery."""

    def __init__(self, real: WebhookSender, broken: int) -> None:
        self._real, self._broken = real, broken

    def send(self, delivery: Delivery, now: datetime) -> policy.Result | policy.Postponed:
        if delivery.id == self._broken:
            raise ZeroDivisionError("a bug in an adapter")
        return self._real.send(delivery, now)


@pytest.fixture
def pool(database_url: str) -> Iterator[ConnectionPool]:
    pool = make_pool(database_url, max_size=2)
    pool.open()
    yield pool
    pool.close()


def test_an_adapter_that_raises_goes_dead_and_the_next_message_is_delivered(
        db: Any, pool: ConnectionPool, receiver: Receiver, infra: Infra, topology: Topology,
        channel: Channel) -> None:
    owner = world.user(db, "owner")
    hook = world.webhook(db, owner, receiver.script("/after-bug", Reply(200)), receiver.secrets[0])
    actor = world.user(db, "actor")
    broken, fine = world.notify(db, owner, actor, webhook_id=hook), world.notify(db, owner, actor, webhook_id=hook)
    real = WebhookSender(LOCAL, 1.0, 2.0, 2)
    processor = processing.Processor(Store(pool), _Raising(real, broken),
                                     processing.Limits("webhook", RETRY, rate=0.0, burst=1))
    stopping = threading.Event()
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    session = delivery_session(conn, topology, "webhook", processor, _executor(), 2, 1000, stopping)
    thread = threading.Thread(target=session.run)
    try:
        broker.declare(channel, topology, "webhook", 1000)  # as the session does: the events reach the queue
        thread.start()
        for delivery_id in (broken, fine):  # as the relay publishes them
            event = ev.Event.new(ev.DELIVERY_WEBHOOK, delivery_id, {"delivery_id": delivery_id})
            channel.basic_publish(topology.events_exchange, ev.DELIVERY_WEBHOOK, ev.encode(event),
                                  pika.BasicProperties(message_id=str(event.id), delivery_mode=2))
        eventually(lambda: world.delivery(db, fine)["status"] == "DELIVERED", what="the next delivered")
        row = world.delivery(db, broken)
        assert row["status"] == "DEAD" and row["last_error"] == "internal error: ZeroDivisionError"
        (props, _), = eventually(lambda: dead_letters(channel, topology), what="dead letter")
        assert props.headers["x-walfeed-reason"] == "internal error: ZeroDivisionError"
        assert [r.webhook_id for r in receiver.to("/after-bug")] == [str(fine)]
    finally:
        stopping.set()
        thread.join(30)
        real.close()
        with contextlib.suppress(pika.exceptions.AMQPError):
            conn.close()


def _executor() -> Any:
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(2)
