"""SMTP adapter of the email channel: one notification, plain text, to the recipient's address."""

from __future__ import annotations

import contextlib
import smtplib
import ssl
from datetime import datetime

from services.delivery import payload
from services.delivery.config import Email
from services.delivery.policy import Answer, NoAnswer, Refused, Result


class EmailSender:
    def __init__(self, settings: Email, timeout: float) -> None:
        self._settings = settings
        self._timeout = timeout

    def close(self) -> None:
        """Nothing held: a connection per mail."""

    def send(self, delivery: payload.Delivery, now: datetime) -> Result:
        if not delivery.email:
            return Refused("the recipient has no email address")
        if delivery.kind not in delivery.email_kinds:
            return Refused(f"the recipient no longer wants {delivery.kind} notifications by mail")
        message = payload.email_message(delivery, self._settings.sender, self._settings.unsubscribe, now)
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
