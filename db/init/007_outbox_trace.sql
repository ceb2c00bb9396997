-- End-to-end traces (docs/adr/0072): the W3C trace context of the request that wrote the event, in the column
-- Debezium's outbox uses for it (`tracingspancontext`, a java.util.Properties text: `traceparent=00-...-01`).
-- The relay copies it into the message's `traceparent` header. Nullable, no default: a catalog-only change (no
-- table rewrite); rows written before it, or by writers that trace nothing, publish without the header.
-- The length check is NOT VALID: checked for new rows only, so adding it scans nothing under the table lock.
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS tracingspancontext text;
ALTER TABLE outbox ADD CONSTRAINT outbox_tracingspancontext_length
    CHECK (octet_length(tracingspancontext) <= 512) NOT VALID;
