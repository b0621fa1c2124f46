-- Reverts txbox SQLite schema version 4 (default prefix txbox_): the key
-- index in id order again.
CREATE INDEX IF NOT EXISTS "txbox_outbox_key" ON "txbox_outbox" (event_type, event_key, id)
    WHERE event_key IS NOT NULL AND status IN ('PENDING', 'IN_PROCESS', 'FAILED');
DROP INDEX IF EXISTS "txbox_outbox_key_order";
ALTER TABLE "txbox_dead_letter" DROP COLUMN seq;
