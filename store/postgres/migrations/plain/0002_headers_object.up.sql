-- txbox schema version 2 for PostgreSQL 13+: headers must be a JSON object.
--
-- The relay delivers headers as a map of strings; a plain-SQL producer
-- that writes an array or a scalar (valid jsonb) is now refused at insert
-- time with a check violation instead of being dead-lettered later.
--
-- PostgreSQL checks a CHECK on every UPDATE of a row, so a row that
-- violates it could not even be claimed: rows written before this
-- migration are dealt with here, in the migration's transaction, as the
-- relay of this version deals with them (docs/schema.md, "Schema version
-- 2"):
--
-- 1. The constraint comes first, NOT VALID: it takes the table's lock
--    until the migration commits, so no producer can add a row between
--    the clean-up below and the commit, and it does not scan the table.
-- 2. A PROCESSED row is done with and only kept for retention: its
--    headers become {}.
-- 3. Any other such row is moved to the dead-letter table with the
--    reason, one attempt counted, as a permanent error would be. An
--    IN_PROCESS one may be in a running relay's hands: that relay's
--    finish is then fenced, and the event may have been sent as well.
--
-- Afterwards no row violates the constraint; `ALTER TABLE ... VALIDATE
-- CONSTRAINT` may be run at any time to record that, nothing requires it.
ALTER TABLE "txbox_outbox"
    ADD CONSTRAINT "txbox_outbox_headers_chk" CHECK (jsonb_typeof(headers) = 'object') NOT VALID;

UPDATE "txbox_outbox" SET headers = '{}'::jsonb
WHERE status = 'PROCESSED' AND jsonb_typeof(headers) <> 'object';

WITH gone AS (
    DELETE FROM "txbox_outbox"
    WHERE status <> 'PROCESSED' AND jsonb_typeof(headers) <> 'object'
    RETURNING id, event_type, event_key, payload, headers, attempts, created_at
)
INSERT INTO "txbox_dead_letter" AS x
    (id, event_type, event_key, payload, headers, attempts, last_error, created_at, failed_at, status, resolved_at)
SELECT id, event_type, event_key, payload, headers, attempts + 1,
    'not sent: headers are not a JSON object: ' || left(headers::text, 64) || ' (dead-lettered by schema migration 2)',
    created_at, now(), 'UNRESOLVED', NULL
FROM gone
ON CONFLICT (id) DO UPDATE SET
    event_type = EXCLUDED.event_type, event_key = EXCLUDED.event_key, payload = EXCLUDED.payload,
    headers = EXCLUDED.headers, attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error,
    created_at = EXCLUDED.created_at, failed_at = EXCLUDED.failed_at, status = 'UNRESOLVED', resolved_at = NULL;
