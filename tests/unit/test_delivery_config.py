"""Settings of `walfeed deliver` (services/delivery/config.py) and what a delivery sends (payload.py)."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime

import orjson
import pytest

from services.core.settings import SettingsError
from services.delivery import payload
from services.delivery.config import DeliverySettings, parse_smtp_url

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def test_defaults_are_the_documented_ones() -> None:
    settings = DeliverySettings.from_env("webhook", {})
    assert (settings.retry.base, settings.retry.cap, settings.retry.max_attempts) == (30.0, 1800.0, 12)
    assert (settings.rate, settings.burst, settings.timeout, settings.connect_timeout) == (10.0, 20, 15.0, 5.0)
    assert settings.ssrf.allowed_networks == () and not settings.ssrf.allow_http and settings.email is None


@pytest.mark.parametrize(("env", "named"), [
    ({"WALFEED_DELIVERY_RETRY_BASE": "60", "WALFEED_DELIVERY_RETRY_CAP": "30"}, "WALFEED_DELIVERY_RETRY_CAP"),
    ({"WALFEED_DELIVERY_TIMEOUT": "1", "WALFEED_DELIVERY_CONNECT_TIMEOUT": "5"}, "WALFEED_DELIVERY_TIMEOUT"),
    ({"WALFEED_DELIVERY_RATE": "-1"}, "WALFEED_DELIVERY_RATE"),
    ({"WALFEED_WEBHOOK_ALLOWED_NETWORKS": "10.0.0.0/8,intranet"}, "WALFEED_WEBHOOK_ALLOWED_NETWORKS"),
    ({"WALFEED_WEBHOOK_ALLOW_HTTP": "perhaps"}, "WALFEED_WEBHOOK_ALLOW_HTTP"),
])
def test_an_invalid_setting_names_its_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        DeliverySettings.from_env("webhook", env)


def test_allowed_networks_are_parsed() -> None:
    settings = DeliverySettings.from_env("webhook", {"WALFEED_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8, fd00::/8"})
    assert settings.ssrf.allowed_networks == (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("fd00::/8"))


def test_the_email_channel_needs_an_smtp_url_and_says_so() -> None:
    with pytest.raises(SettingsError, match="WALFEED_SMTP_URL is not set"):
        DeliverySettings.from_env("email", {})


def test_smtp_urls_and_their_tls_and_never_a_password_in_an_error_or_repr() -> None:
    smtp = parse_smtp_url("smtp+starttls://me%40x:s3cr%2Ft@mail.example.com")
    assert (smtp.host, smtp.port, smtp.tls, smtp.username, smtp.password) == (
        "mail.example.com", 587, "starttls", "me@x", "s3cr/t")
    assert "s3cr" not in repr(smtp)
    assert parse_smtp_url("smtps://mail.example.com").port == 465
    assert parse_smtp_url("smtp://127.0.0.1:2525").tls == "none"
    with pytest.raises(SettingsError) as info:
        parse_smtp_url("http://user:hunter2@mail.example.com")
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("url", [None, "ftp://walfeed.example.com", "http://walfeed.example.com", "https://",
                                 "https://h/?q=1", "https://u:p@h", "http://127.0.0.1.evil.example", "https://h:x"])
def test_the_email_channel_needs_the_apis_https_url_for_its_unsubscribe_links(url: str | None) -> None:
    env = {"WALFEED_SMTP_URL": "smtp://m", **({"WALFEED_API_PUBLIC_URL": url} if url is not None else {})}
    with pytest.raises(SettingsError, match="WALFEED_API_PUBLIC_URL"):
        DeliverySettings.from_env("email", env)


@pytest.mark.parametrize(("url", "kept"), [("https://walfeed.example.com/", "https://walfeed.example.com"),
                                           ("https://walfeed.example.com:8443/api", "https://walfeed.example.com:8443/api"),
                                           ("http://127.0.0.1:8000", "http://127.0.0.1:8000")])
def test_the_apis_url_is_https_or_plain_http_on_loopback(url: str, kept: str) -> None:
    email = DeliverySettings.from_env("email", {"WALFEED_SMTP_URL": "smtp://m", "WALFEED_API_PUBLIC_URL": url}).email
    assert email is not None and email.api_url == kept


def _mention() -> payload.Delivery:
    return payload.Delivery(id=5, channel="webhook", status="PENDING", recipient_id=3, created_at=NOW,
                            notification_id=9, kind="mention", actor_id=7, actor_handle="alice", post_id=99,
                            post_body="hi @bob", notified_at=NOW, webhook_id=1, url="https://x.example/",
                            secret="whsec_c2VjcmV0", previous_secret="whsec_b2xk", email="bob@example.com")


def test_the_webhook_body_is_the_standard_webhooks_shape_and_carries_no_secret() -> None:
    body = payload.webhook_body(_mention())
    assert orjson.loads(body) == {
        "type": "notification.mention", "timestamp": "2026-06-01T12:00:00Z",
        "data": {"notification_id": 9, "kind": "mention", "recipient_id": 3,
                 "actor": {"id": 7, "handle": "alice"}, "post": {"id": 99, "body": "hi @bob"}}}
    assert b"whsec" not in body and b"c2VjcmV0" not in body and b"bob@example.com" not in body
    assert "whsec" not in repr(_mention())


def test_a_ping_has_its_own_type() -> None:
    ping = payload.Delivery(id=6, channel="webhook", status="PENDING", recipient_id=3, created_at=NOW, webhook_id=4)
    assert orjson.loads(payload.webhook_body(ping)) == {"type": "webhook.ping", "timestamp": "2026-06-01T12:00:00Z",
                                                        "data": {"webhook_id": 4}}


def test_the_mail_is_plain_text_with_a_one_click_list_unsubscribe() -> None:
    message = payload.email_message(_mention(), "walfeed <n@walfeed.test>", "https://walfeed.test/v1/unsubscribe?token=t",
                                    NOW)
    assert message["To"] == "bob@example.com" and message["Subject"] == "@alice mentioned you"
    assert message["List-Unsubscribe"] == "<https://walfeed.test/v1/unsubscribe?token=t>"
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert message.get_content_type() == "text/plain" and "hi @bob" in message.get_content()
