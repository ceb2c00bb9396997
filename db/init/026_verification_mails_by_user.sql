-- A user's verification mails (email deliveries without a notification), found by user: setting the same address
-- again while it is unverified mails a new code only when none is on its way (services/api/sql.py UPDATE_ME,
-- docs/adr/0106). Partial: notification mails, almost all of the table, are not in it.
CREATE INDEX IF NOT EXISTS deliveries_verification_idx ON deliveries (recipient_id)
    WHERE notification_id IS NULL;
