-- End-to-end traces (docs/adr/0072): the W3C trace context of the request that wrote the event, in the column
-- Debezium's outbox uses for it (`tracingspancontext`, a java.util.Properties text: `traceparent=00-...-01`).
-- The relay copies it into the message's `traceparent` header. Nullable, no default: a catalog-only change (no
-- table rewrite); rows written before it, or by writers that trace nothing, publish without the header.
-- The length check bounds what a writer can put in every event's row and WAL record, with room for what Debezium's
-- writers store (a comment line, traceparent, and a tracestate of up to W3C's 512 characters). NOT VALID: checked
-- for new rows only, so adding it scans nothing under the table lock.
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS tracingspancontext text;
ALTER TABLE outbox ADD CONSTRAINT outbox_tracingspancontext_length
    CHECK (octet_length(tracingspancontext) <= 2048) NOT VALID;
