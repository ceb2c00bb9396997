"""Pure parts of the least-privilege set-up: settings, names, AMQP permission patterns, per-process URLs."""

from __future__ import annotations

import base64
import http.server
import json
import re
import threading
from typing import ClassVar

import pytest
from psycopg.conninfo import conninfo_to_dict

from services.cli import main
from services.cli.broker_users import ManagementApi, vhost_of
from services.cli.roles import (
    Permissions,
    RoleSettings,
    amqp_permissions,
    password_variables,
    process_environ,
    with_credentials,
)
from services.core.settings import SettingsError
from services.core.topology import Topology

PASSWORDS = {v: f"{v.lower()}-0123456789" for v in password_variables()}


@pytest.mark.parametrize("missing", password_variables())
def test_a_missing_password_names_its_variable(missing: str) -> None:
    with pytest.raises(SettingsError, match=f"{missing} is not set"):
        RoleSettings.from_env({k: v for k, v in PASSWORDS.items() if k != missing})


@pytest.mark.parametrize(("var", "value"), [
    ("WALFEED_API_DB_PASSWORD", "short"),
    ("WALFEED_WORKER_AMQP_PASSWORD", " padded-password-123 "),
    ("WALFEED_ROLE_PREFIX", "Bad-Prefix"),
    ("WALFEED_RABBITMQ_MANAGEMENT_URL", "amqp://admin@rabbitmq"),
])
def test_an_invalid_value_names_its_variable_and_never_shows_a_password(var: str, value: str) -> None:
    with pytest.raises(SettingsError, match=var) as error:
        RoleSettings.from_env({**PASSWORDS, var: value})
    assert "PASSWORD" not in var or value.strip() not in str(error.value)


@pytest.mark.parametrize("url", ["admin:S3cretS3cret@mq:15672", "HTTPS://admin:S3cretS3cret@mq"])
def test_an_invalid_management_url_is_named_without_its_password(url: str) -> None:
    with pytest.raises(SettingsError, match="WALFEED_RABBITMQ_MANAGEMENT_URL") as error:
        RoleSettings.from_env({**PASSWORDS, "WALFEED_RABBITMQ_MANAGEMENT_URL": url})
    assert "S3cret" not in str(error.value)


def test_bootstrap_roles_without_passwords_stops_naming_the_variable(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for var in password_variables():
        monkeypatch.delenv(var, raising=False)
    assert main(["bootstrap-roles"]) == 2
    assert "WALFEED_API_DB_PASSWORD is not set" in capsys.readouterr().err


def test_role_names_follow_the_prefix() -> None:
    roles = RoleSettings.from_env({**PASSWORDS, "WALFEED_ROLE_PREFIX": "acme"}).roles
    assert (roles.owner, roles.login("api"), roles.login("relay"), roles.login("worker")) == (
        "acme_owner", "acme_api", "acme_relay", "acme_worker")


def _allows(pattern: str, name: str) -> bool:
    return re.search(pattern, name) is not None  # how RabbitMQ matches a permission against a resource name


def test_amqp_permissions_cover_exactly_each_process_names() -> None:
    t = Topology("wf")
    relay, worker = amqp_permissions(t)["relay"], amqp_permissions(t)["worker"]
    everything = ["wf.events", "wf.fanout.settle", "wf.fanout", "wf.fanout.retry", "wf.fanout.dead", "amq.default",
                  "other.events", "wf.eventsX", "xwf.events", "wfXevents"]
    assert [n for n in everything if _allows(relay.configure, n)] == ["wf.events"]
    assert [n for n in everything if _allows(relay.write, n)] == ["wf.events"]
    assert [n for n in everything if _allows(relay.read, n)] == []
    own = ["wf.events", "wf.fanout.settle", "wf.fanout", "wf.fanout.retry", "wf.fanout.dead"]
    assert [n for n in everything if _allows(worker.configure, n)] == own
    assert [n for n in everything if _allows(worker.write, n)] == own[1:]  # not the events exchange, not amq.default
    assert [n for n in everything if _allows(worker.read, n)] == own


def test_the_api_user_may_only_read_events_through_its_stream_queues() -> None:
    api = amqp_permissions(Topology("wf"))["api"]
    names = ["wf.events", "wf.stream.0a1b2c3d4e5f6a7b", "wf.stream.", "wf.stream.x", "wf.fanout", "wf.events.grouped",
             "amq.default", "other.stream.0a1b", "wf.stream.0a1b.dead"]
    assert [n for n in names if _allows(api.configure, n)] == ["wf.events", "wf.stream.0a1b2c3d4e5f6a7b"]
    assert [n for n in names if _allows(api.read, n)] == ["wf.events", "wf.stream.0a1b2c3d4e5f6a7b"]
    assert [n for n in names if _allows(api.write, n)] == ["wf.stream.0a1b2c3d4e5f6a7b"]  # binds; publishes nowhere


def test_the_delivery_user_may_use_only_its_queues_and_settle_exchange() -> None:
    t = Topology("wf")
    delivery = amqp_permissions(t)["delivery"]
    own = [t.delivery_settle_exchange, *t.all_delivery_queues()]
    others = ["wf.fanout", "wf.fanout.settle", "wf.fanout.dead", "amq.default", "wf.deliveries.webhookX",
              "wf.deliveries.webhook.retry.100ms", "other.deliveries.webhook"]
    assert all(_allows(delivery.write, n) and _allows(delivery.read, n) and _allows(delivery.configure, n)
               for n in own)
    assert not any(_allows(p, n) for p in (delivery.write, delivery.read, delivery.configure) for n in others)
    assert not _allows(delivery.write, "wf.events") and _allows(delivery.read, "wf.events")


def test_the_embedder_user_may_consume_its_queue_and_publish_nothing() -> None:
    t = Topology("wf")
    embedder = amqp_permissions(t)["embedder"]
    names = ["wf.embedder", "wf.events.grouped", "wf.events", "wf.fanout", "wf.fanout.settle", "amq.default",
             "wf.embedderX", "wf.notifier"]
    assert [n for n in names if _allows(embedder.configure, n)] == ["wf.embedder", "wf.events.grouped"]
    assert [n for n in names if _allows(embedder.write, n)] == ["wf.embedder"]  # binding it; no exchange to publish to
    assert [n for n in names if _allows(embedder.read, n)] == ["wf.embedder", "wf.events.grouped"]


def test_each_process_gets_its_own_credentials_and_none_of_the_bootstrap_secrets() -> None:
    roles = RoleSettings.from_env({**PASSWORDS, "WALFEED_ROLE_PREFIX": "acme"})
    environ = {**PASSWORDS, "WALFEED_RABBITMQ_MANAGEMENT_URL": "http://admin:s3cret@mq:15672", "KEEP": "1"}
    worker = process_environ(environ, "postgresql://postgres@db:5432/walfeed", "amqp://guest:guest@mq:5672/%2F",
                             roles, "worker")
    assert not set(worker) & {*password_variables(), "WALFEED_RABBITMQ_MANAGEMENT_URL"}
    assert worker["KEEP"] == "1"
    db = conninfo_to_dict(worker["WALFEED_DATABASE_URL"])
    assert (db["user"], db["password"], db["host"], db["dbname"]) == (
        "acme_worker", PASSWORDS["WALFEED_WORKER_DB_PASSWORD"], "db", "walfeed")
    assert worker["WALFEED_AMQP_URL"] == f"amqp://acme_worker:{PASSWORDS['WALFEED_WORKER_AMQP_PASSWORD']}@mq:5672/%2F"
    api = process_environ(environ, "postgresql:///walfeed", "amqp://guest:guest@mq:5672/%2F", roles, "api")
    # the api's own broker user, for the Mastodon live stream's queues (docs/adr/0140)
    assert api["WALFEED_AMQP_URL"] == f"amqp://acme_api:{PASSWORDS['WALFEED_API_AMQP_PASSWORD']}@mq:5672/%2F"


def test_credentials_and_vhosts_are_url_encoded() -> None:
    url = with_credentials("amqp://guest:guest@mq/%2F", "u@x", "p/w:d")
    assert url == "amqp://u%40x:p%2Fw%3Ad@mq/%2F"
    assert (vhost_of(url), vhost_of("amqp://mq/prod"), vhost_of("amqp://mq")) == ("/", "prod", "/")


class _FakeManagement(http.server.BaseHTTPRequestHandler):
    """Records each request of the RabbitMQ management API client; answers 204, or 404 for unknown users."""

    seen: ClassVar[list[tuple[str, str, str | None, object]]] = []

    def _record(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.seen.append((self.command, self.path, self.headers.get("Authorization"), body))
        self.send_response(404 if self.command == "DELETE" else 204)
        self.end_headers()

    do_PUT = do_DELETE = _record

    def log_message(self, *args: object) -> None:
        pass


def test_the_management_api_client_sends_users_and_permissions_without_leaking_credentials() -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), _FakeManagement)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        admin = ManagementApi(f"http://admin:p%40ss@127.0.0.1:{server.server_port}/")
        admin.ensure_user("wf_worker", "secret-password-123", "/", Permissions("^c$", "^w$", "^r$"))
        admin.delete_user("wf_gone")  # 404: already gone is fine
    finally:
        server.shutdown()
        server.server_close()
    auth = "Basic " + base64.b64encode(b"admin:p@ss").decode()
    assert _FakeManagement.seen == [
        ("PUT", "/api/users/wf_worker", auth, {"password": "secret-password-123", "tags": ""}),
        ("PUT", "/api/permissions/%2F/wf_worker", auth, {"configure": "^c$", "write": "^w$", "read": "^r$"}),
        ("DELETE", "/api/users/wf_gone", auth, None),
    ]

