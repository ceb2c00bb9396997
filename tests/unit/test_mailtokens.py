"""Mail tokens (services/core/mailtokens.py) and which mail the email worker sends (services/delivery/mail.py):
a notification to a verified address only, the verification code to an unverified one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.core import mailtokens
from services.delivery import payload
from services.delivery.config import Email, Smtp
from services.delivery.mail import EmailSender
from services.delivery.policy import Refused

KEY = b"k" * 32
NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)


def test_a_code_verifies_its_user_and_address_until_it_expires() -> None:
    code = mailtokens.parse_verification(mailtokens.verification_code(KEY, 7, "a@example.com", 1000.0))
    assert code is not None and code.user == 7
    assert mailtokens.verifies(KEY, code, 7, "a@example.com", 1000.0 + mailtokens.VERIFY_SECONDS - 1)
    assert not mailtokens.verifies(KEY, code, 7, "a@example.com", 1000.0 + mailtokens.VERIFY_SECONDS)
    assert not mailtokens.verifies(KEY, code, 8, "a@example.com", 1000.0)
    assert not mailtokens.verifies(KEY, code, 7, "b@example.com", 1000.0)
    assert not mailtokens.verifies(b"other key of 32 bytes...........", code, 7, "a@example.com", 1000.0)


def test_an_unsubscribe_token_is_bound_to_user_kind_and_address() -> None:
    token = mailtokens.parse_unsubscribe(mailtokens.unsubscribe_token(KEY, 7, "mention", "a@example.com"))
    assert token is not None and (token.user, token.kind) == (7, "mention")
    assert mailtokens.unsubscribes(KEY, token, "a@example.com")
    assert not mailtokens.unsubscribes(KEY, token, "b@example.com")
    forged = mailtokens.parse_unsubscribe(mailtokens.unsubscribe_token(KEY, 7, "mention", "a@example.com")
                                          .replace(".mention.", ".follow."))
    assert forged is not None and not mailtokens.unsubscribes(KEY, forged, "a@example.com")


@given(st.text(max_size=300))
def test_any_text_parses_totally(text: str) -> None:
    mailtokens.parse_verification(text)
    mailtokens.parse_unsubscribe(text)


@pytest.mark.parametrize("text", ["0.1.x", "99999999999999999999.1." + "A" * 43, "1.like." + "A" * 43, ""])
def test_what_is_not_a_token_is_none(text: str) -> None:
    assert mailtokens.parse_unsubscribe(text) is None and mailtokens.parse_verification(text) is None


def _sender() -> EmailSender:
    return EmailSender(Email(Smtp("127.0.0.1", 25, "none", None), "walfeed <n@walfeed.test>",
                             "https://walfeed.test"), 1.0)


def _mail(**fields: object) -> payload.Delivery:
    base: dict[str, object] = {"id": 5, "channel": "email", "status": "PENDING", "recipient_id": 3,
                               "created_at": NOW, "notification_id": 9, "kind": "mention", "actor_handle": "alice",
                               "post_id": 1, "post_body": "hi", "recipient_handle": "bob", "email": "b@example.com",
                               "email_kinds": ("mention",), "email_verified_at": NOW, "token_key": KEY}
    return payload.Delivery(**{**base, **fields})  # type: ignore[arg-type]


def test_notification_mail_goes_to_a_verified_address_only() -> None:
    refused = _sender().message(_mail(email_verified_at=None), NOW)
    assert isinstance(refused, Refused) and "not verified" in refused.reason
    message = _sender().message(_mail(), NOW)
    assert not isinstance(message, Refused)
    url = message["List-Unsubscribe"][1:-1]
    assert url.startswith("https://walfeed.test/v1/unsubscribe?token=3.mention.")


def test_a_delivery_without_notification_mails_the_code_while_the_address_is_unverified() -> None:
    message = _sender().message(_mail(notification_id=None, kind=None, email_verified_at=None), NOW)
    assert not isinstance(message, Refused) and "List-Unsubscribe" not in message
    (code,) = [w for w in message.get_content().split() if mailtokens.parse_verification(w)]
    parsed = mailtokens.parse_verification(code)
    assert parsed is not None and mailtokens.verifies(KEY, parsed, 3, "b@example.com", NOW.timestamp())
    assert isinstance(_sender().message(_mail(notification_id=None, kind=None), NOW), Refused)  # verified already
