"""WALFEED_AMQP_QUEUE_TYPE and a WALFEED_AMQP_URL of several nodes (docs/amqp.md, docs/adr/0090): parsing, and the
arguments each queue gets by type."""

from __future__ import annotations

import re

import pytest

from services.cli.broker_users import vhost_of
from services.cli.dead_letters import Letter
from services.cli.roles import amqp_permissions, with_credentials
from services.consumer import broker
from services.core import amqp, nodes, queues
from services.core.settings import Settings, SettingsError
from services.core.topology import Topology

TWO = "amqp://guest:guest@127.0.0.1:5672/%2F, amqp://guest:guest@127.0.0.1:5673/%2F"


def test_the_queue_type_is_classic_by_default_and_quorum_when_asked() -> None:
    assert Settings.from_env({}).amqp_queue_type == "classic"
    assert Settings.from_env({"WALFEED_AMQP_QUEUE_TYPE": " Quorum "}).amqp_queue_type == "quorum"


@pytest.mark.parametrize("value", ["stream", "mirrored", "classic,quorum"])
def test_an_unknown_queue_type_stops_the_process_naming_the_setting(value: str) -> None:
    with pytest.raises(SettingsError, match=r"WALFEED_AMQP_QUEUE_TYPE=.*expected one of classic, quorum"):
        Settings.from_env({"WALFEED_AMQP_QUEUE_TYPE": value})


def test_several_nodes_are_comma_separated_urls_in_their_order() -> None:
    settings = Settings.from_env({"WALFEED_AMQP_URL": TWO})
    assert settings.amqp_nodes == ("amqp://guest:guest@127.0.0.1:5672/%2F", "amqp://guest:guest@127.0.0.1:5673/%2F")
    assert [(p.host, p.port) for p in amqp.node_parameters(TWO)] == [("127.0.0.1", 5672), ("127.0.0.1", 5673)]
    assert nodes.split("amqp://localhost") == ("amqp://localhost",)  # one node, as always


@pytest.mark.parametrize(("value", "why"), [
    ("amqp://a:5672/%2F,", "none empty"),
    ("amqp://a:5672/%2F,http://b:5672/%2F", "'http://b:5672/%2F' is invalid"),
    ("amqp://a:5672/%2F,amqp://b:5672/other", "same virtual host"),
    ("amqp://a:5672/%2F,amqp://a:5672/%2F", "listed twice"),
    ("amqp://a:port/%2F", "invalid port"),
    ("amqp:///%2F", "invalid"),
])
def test_a_bad_node_list_stops_the_process_naming_the_setting(value: str, why: str) -> None:
    with pytest.raises(SettingsError, match="WALFEED_AMQP_URL") as caught:
        Settings.from_env({"WALFEED_AMQP_URL": value})
    assert why in str(caught.value)


def test_every_node_gets_the_process_credentials_and_the_vhost_is_theirs() -> None:
    url = "amqp://admin:secret@n1:5672/feeds,amqp://admin:secret@n2:5672/feeds"
    assert with_credentials(url, "walfeed_worker", "pw") == (
        "amqp://walfeed_worker:pw@n1:5672/feeds,amqp://walfeed_worker:pw@n2:5672/feeds")
    assert vhost_of(url) == "feeds"


def test_classic_queues_keep_exactly_the_arguments_walfeed_always_declared() -> None:
    # An upgrade must never trip over its own queues (docs/operations.md "Upgrading").
    assert queues.work_queue("classic", "s", "d") == {}
    assert queues.retry_queue("classic", "s", "w") == {"x-dead-letter-exchange": "s", "x-dead-letter-routing-key": "w"}
    assert queues.retry_queue("classic", "s", "w", 128) == {
        "x-message-ttl": 128, "x-dead-letter-exchange": "s", "x-dead-letter-routing-key": "w"}
    assert broker.dead_queue_arguments(7) == {"x-max-length": 7, "x-overflow": "reject-publish"}


def test_quorum_queues_dead_letter_at_least_once_and_work_queues_have_a_delivery_limit() -> None:
    work = queues.work_queue("quorum", "p.settle", "p.dead")
    assert work == {"x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once",
                    "x-overflow": "reject-publish", "x-dead-letter-exchange": "p.settle",
                    "x-dead-letter-routing-key": "p.dead", "x-delivery-limit": queues.DELIVERY_LIMIT}
    retry = queues.retry_queue("quorum", "p.settle", "p", 256)
    assert retry == {"x-message-ttl": 256, "x-dead-letter-exchange": "p.settle", "x-dead-letter-routing-key": "p",
                     "x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once",
                     "x-overflow": "reject-publish"}
    assert queues.dead_queue("quorum", 9) == {"x-max-length": 9, "x-overflow": "reject-publish",
                                              "x-queue-type": "quorum"}


def test_with_quorum_queues_the_notifier_may_declare_the_delivery_queues_dead_lettering() -> None:
    t = Topology("p")
    classic, quorum = amqp_permissions(t)["notifier"], amqp_permissions(t, "quorum")["notifier"]
    settle, work = t.delivery_settle_exchange, t.delivery_queue("webhook")
    assert not re.match(classic.write, settle) and not re.match(classic.read, work)
    assert re.match(quorum.write, settle) and re.match(quorum.read, work)
    assert not re.match(quorum.read, t.delivery_dead_queue("webhook"))


def test_a_letter_the_broker_dead_lettered_over_the_delivery_limit_says_so() -> None:
    # As RabbitMQ 3.10 delivers it: x-death lists the latest dead-lettering first (here after a retry expired).
    deaths = [{"queue": b"p.fanout", "reason": b"delivery_limit", "count": 1},
              {"queue": b"p.fanout.retry", "reason": b"expired", "count": 1}]
    letter = Letter("p.fanout.dead", 1, b"{}", {}, {"x-death": deaths, "x-first-death-reason": b"expired"})
    assert letter.reason == "dead-lettered by the broker: delivery_limit from p.fanout"
    assert Letter("p.fanout.dead", 2, b"{}", {}, {"x-walfeed-reason": b"unknown type"}).reason == "unknown type"
