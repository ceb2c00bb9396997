"""SMTP adapter of the email channel: one notification, plain text, to the recipient's address."""

from __future__ import annotations

import contextlib
import smtplib
import ssl
import time
from datetime import datetime
from email.message import EmailMessage
from urllib.parse import quote

from services.core import mailtokens
from services.delivery import payload
from services.delivery.config import Email
from services.delivery.policy import Answer, NoAnswer, Refused, Result


class EmailSender:
    def __init__(self, settings: Email, timeout: float) -> None:
        self._settings = settings
        self._timeout = timeout

    def close(self) -> None:
        """Nothing held: a connection per mail."""

    def message(self, delivery: payload.Delivery, now: datetime) -> EmailMessage | Refused:
        """The mail of `delivery`: a notification to a verified address that still wants its kind, or (without a
        notification) the verification code of an address not verified yet; else why none is sent."""
        if not delivery.email:
            return Refused("the recipient has no email address")
        if delivery.token_key is None:
            return Refused("no key to sign mail tokens: run walfeed migrate (db/init/017_email_verification.sql)")
        if delivery.notification_id is None:
            if delivery.email_verified_at is not None:
                return Refused("the address is verified already")
            code = mailtokens.verification_code(delivery.token_key, delivery.recipient_id, delivery.email,
                                                time.time())
            return payload.verification_message(delivery, self._settings.sender, code, now)
        if delivery.email_verified_at is None:
            return Refused("the recipient's address is not verified")
        if delivery.kind not in delivery.email_kinds:
            return Refused(f"the recipient no longer wants {delivery.kind} notifications by mail")
        token = mailtokens.unsubscribe_token(delivery.token_key, delivery.recipient_id, delivery.kind or "",
                                             delivery.email)
        unsubscribe = f"{self._settings.api_url}/v1/unsubscribe?token={quote(token)}"
        return payload.email_message(delivery, self._settings.sender, unsubscribe, now)

    def send(self, delivery: payload.Delivery, now: datetime) -> Result:
        message = self.message(delivery, now)
        if isinstance(message, Refused):
            return message
        assert delivery.email is not None  # message() refused otherwise
        smtp = self._settings.smtp
        try:
            client = (smtplib.SMTP_SSL(smtp.host, smtp.port, timeout=self._timeout,
                                       context=ssl.create_default_context())
                      if smtp.tls == "implicit" else smtplib.SMTP(smtp.host, smtp.port, timeout=self._timeout))
            try:
                if smtp.tls == "starttls":
                    client.starttls(context=ssl.create_default_context())
                if smtp.username:
                    client.login(smtp.username, smtp.password or "")
                client.send_message(message, to_addrs=[delivery.email])
            finally:
                with contextlib.suppress(smtplib.SMTPException, OSError):  # the mail is sent whatever QUIT says
                    client.quit()
        except smtplib.SMTPRecipientsRefused as exc:
            code, reply = next(iter(exc.recipients.values()))
            return Answer(code, excerpt=reply.decode("utf-8", "replace")[:4096], smtp=True)
        except smtplib.SMTPResponseException as exc:
            error = exc.smtp_error
            text = error.decode("utf-8", "replace") if isinstance(error, bytes) else str(error)
            return Answer(exc.smtp_code, excerpt=text[:4096], smtp=True)
        except (smtplib.SMTPException, OSError) as exc:
            return NoAnswer(f"{type(exc).__name__}: {exc}"[:500])
        return Answer(250, smtp=True)
