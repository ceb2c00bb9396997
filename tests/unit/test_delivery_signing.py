"""Standard Webhooks signing (services/core/signing.py), checked against the specification's reference library."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from services.core import signing

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@given(st.dictionaries(st.text(max_size=20), st.integers() | st.text(max_size=50), max_size=20),
       st.text(alphabet="abcdefghij0123456789_", min_size=1, max_size=40))
def test_the_reference_library_accepts_every_signature(data: dict[str, object], msg_id: str) -> None:
    body = json.dumps(data).encode()  # the reference library parses the body as JSON after verifying it
    secret = signing.generate_secret()
    timestamp = int(datetime.now(UTC).timestamp())
    headers = signing.headers(msg_id, timestamp, body, [secret])
    Webhook(secret).verify(body, headers)


def test_during_a_rotation_either_secret_verifies() -> None:
    new, old = signing.generate_secret(), signing.generate_secret()
    body = b'{"type":"ping"}'
    timestamp = int(datetime.now(UTC).timestamp())
    secrets = signing.active_secrets(new, old, NOW + timedelta(hours=1), NOW)
    headers = signing.headers("7", timestamp, body, secrets)
    assert len(headers["webhook-signature"].split(" ")) == 2
    Webhook(new).verify(body, headers)
    Webhook(old).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(signing.generate_secret()).verify(body, headers)


def test_the_previous_secret_stops_signing_when_its_overlap_ends() -> None:
    assert signing.active_secrets("whsec_a", "whsec_b", NOW, NOW) == ("whsec_a",)
    assert signing.active_secrets("whsec_a", "whsec_b", None, NOW) == ("whsec_a",)
    assert signing.active_secrets("whsec_a", None, NOW + timedelta(1), NOW) == ("whsec_a",)


def test_the_specification_example_signature() -> None:
    # The example of the Standard Webhooks specification (spec/standard-webhooks.md, "Signature scheme").
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"test": 2432232314}'
    assert signing.signature(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body) == \
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


@pytest.mark.parametrize("secret", ["MfKQ9r8G", "whsec_", "whsec_not base64!"])
def test_malformed_secrets_are_refused_without_echoing_them(secret: str) -> None:
    with pytest.raises(signing.InvalidSecret) as info:
        signing.key(secret)
    assert secret[6:] not in str(info.value) or not secret[6:]


def test_new_secrets_are_distinct_and_well_formed() -> None:
    a, b = signing.generate_secret(), signing.generate_secret()
    assert a != b and a.startswith("whsec_") and len(signing.key(a)) == signing.KEY_BYTES
