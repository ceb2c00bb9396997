"""`walfeed deliver --channel email` as a real process, fed by the real relay, sending to a real SMTP server
(aiosmtpd) started by the test."""

from __future__ import annotations

import email
import email.policy
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any
from urllib.parse import unquote

import pytest
from aiosmtpd.controller import Controller
from pika.adapters.blocking_connection import BlockingChannel as Channel

from services.consumer import headers
from services.core import mailtokens
from services.core.topology import Topology
from testkit.processes import free_port
from testkit.waiting import eventually
from tests.integration.delivery import world
from tests.integration.delivery.conftest import StartPipeline, dead_letters
from tests.integration.ops.conftest import command, depth

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


@dataclass
class Mailbox:
    """An SMTP server's DATA handler: answers from a script (the last repeats), keeps every accepted message."""

    replies: list[str] = field(default_factory=lambda: ["250 OK"])
    received: list[tuple[list[str], EmailMessage]] = field(default_factory=list)
    tries: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.lock:
            self.tries += 1
            reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
            if reply.startswith("250"):
                message = email.message_from_bytes(envelope.content, policy=email.policy.default)
                self.received.append((list(envelope.rcpt_tos), message))
        return reply


@pytest.fixture
def mailbox() -> Iterator[tuple[Mailbox, int]]:
    box, port = Mailbox(), free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield box, port
    finally:
        controller.stop()


API_URL = "https://walfeed.test/api"


def _env(port: int) -> dict[str, str]:
    return {"WALFEED_SMTP_URL": f"smtp://127.0.0.1:{port}", "WALFEED_SMTP_FROM": "walfeed <notify@walfeed.test>",
            "WALFEED_API_PUBLIC_URL": API_URL}


def _key(db: Any) -> bytes:
    return bytes(db.execute("SELECT value FROM server_secrets WHERE name = 'email_tokens'").fetchone()[0])


def _settled(db: Any, delivery_id: int, status: str) -> dict[str, Any]:
    return eventually(lambda: (row := world.delivery(db, delivery_id))["status"] == status and row,
                      what=f"delivery {delivery_id} {status}")


def test_a_follow_is_mailed_as_plain_text_with_a_one_click_unsubscribe(
        db: Any, mailbox: tuple[Mailbox, int], start_pipeline: StartPipeline) -> None:
    box, port = mailbox
    bob = world.user(db, "bob", email="bob@example.test", email_kinds=("follow",))
    alice = world.user(db, "alice")
    start_pipeline("email", **_env(port))
    delivery_id = world.notify(db, bob, alice, email=True)
    assert _settled(db, delivery_id, "DELIVERED")["last_status_code"] == 250
    ((recipients, message),) = box.received
    assert recipients == ["bob@example.test"] and message["To"] == "bob@example.test"
    assert message["From"] == "walfeed <notify@walfeed.test>" and message["Subject"] == "@alice followed you"
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"  # RFC 8058
    url = message["List-Unsubscribe"]
    assert url.startswith(f"<{API_URL}/v1/unsubscribe?token=") and url.endswith(">"), url
    token = mailtokens.parse_unsubscribe(unquote(url[1:-1].split("token=", 1)[1]))
    assert token is not None and (token.user, token.kind) == (bob, "follow")
    assert mailtokens.unsubscribes(_key(db), token, "bob@example.test")
    assert not mailtokens.unsubscribes(_key(db), token, "someone-else@example.test")
    assert message.get_content_type() == "text/plain" and "@alice now follows you" in message.get_content()


def test_no_notification_mail_goes_to_an_unverified_address_but_its_verification_code_does(
        db: Any, mailbox: tuple[Mailbox, int], start_pipeline: StartPipeline) -> None:
    """An address set by anyone is not mailed a notification until its mailbox sent back the code."""
    box, port = mailbox
    bob = world.user(db, "bob", email="victim@example.test", email_kinds=("follow",), verified=False)
    start_pipeline("email", **_env(port))
    refused = world.notify(db, bob, world.user(db, "alice"), email=True)
    assert "not verified" in _settled(db, refused, "DEAD")["last_error"]
    row = db.execute("INSERT INTO deliveries (channel, recipient_id) VALUES ('email', %s) RETURNING id",
                     (bob,)).fetchone()
    db.execute("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "
               "(gen_random_uuid(), 'delivery', %s, 'delivery.email', jsonb_build_object('delivery_id', %s::bigint))",
               (str(row[0]), row[0]))
    db.commit()
    _settled(db, row[0], "DELIVERED")
    ((recipients, message),) = box.received  # the code only, never the notification
    assert recipients == ["victim@example.test"] and "List-Unsubscribe" not in message
    assert message["Subject"] == "Confirm your address for walfeed notifications" and "@bob" in message.get_content()
    (code,) = [line.strip() for line in message.get_content().splitlines()
               if mailtokens.parse_verification(line.strip())]
    parsed = mailtokens.parse_verification(code)
    assert parsed is not None and mailtokens.verifies(_key(db), parsed, bob, "victim@example.test", time.time())


def test_smtp_4xx_is_retried_and_5xx_is_dead(
        db: Any, mailbox: tuple[Mailbox, int], start_pipeline: StartPipeline, channel: Channel,
        topology: Topology) -> None:
    box, port = mailbox
    box.replies = ["451 4.3.0 try again later", "250 OK"]
    bob = world.user(db, "bob", email="bob@example.test", email_kinds=("follow", "mention"))
    start_pipeline("email", **_env(port))
    retried = world.notify(db, bob, world.user(db, "alice"), email=True)
    row = _settled(db, retried, "DELIVERED")
    assert row["attempts"] == 2 and box.tries == 2
    box.replies = ["550 5.1.1 no such mailbox"]
    dead = world.notify(db, bob, world.user(db, "carol"), email=True)
    row = _settled(db, dead, "DEAD")
    assert row["attempts"] == 1 and row["last_status_code"] == 550 and "no such mailbox" in row["response_excerpt"]
    (props, _), = eventually(lambda: dead_letters(channel, topology, "email"), what="dead letter")
    assert props.headers[headers.REASON] == "SMTP 550"


def test_a_dead_mail_replayed_by_walfeed_dead_is_sent_once_the_mailbox_accepts(
        db: Any, mailbox: tuple[Mailbox, int], start_pipeline: StartPipeline, channel: Channel, topology: Topology,
        walfeed_env: dict[str, str]) -> None:
    box, port = mailbox
    box.replies = ["550 5.1.1 no such mailbox", "250 OK"]  # then the mailbox exists
    bob = world.user(db, "bob", email="bob@example.test", email_kinds=("follow",))
    start_pipeline("email", **_env(port))
    dead = world.notify(db, bob, world.user(db, "alice"), email=True)
    _settled(db, dead, "DEAD")
    eventually(lambda: depth(channel, topology.delivery_dead_queue("email")) == 1, what="the dead letter")
    replayed = subprocess.run(command("dead", "replay", "--queue", "deliveries.email.dead"),
                              env={**os.environ, **walfeed_env}, text=True, capture_output=True, timeout=120,
                              stdin=subprocess.DEVNULL)
    assert replayed.returncode == 0 and "1 of 1 replayed" in replayed.stderr, replayed.stderr
    assert _settled(db, dead, "DELIVERED")["attempts"] == 1
    assert box.tries == 2 and [rcpt for rcpt, _ in box.received] == [["bob@example.test"]]


def test_the_email_worker_refuses_to_start_without_an_smtp_url(start_pipeline: StartPipeline) -> None:
    worker = start_pipeline("email")
    assert worker.wait(30) == 2
    assert "WALFEED_SMTP_URL is not set" in worker.log()
