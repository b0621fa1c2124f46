-- Reverts schema version 4: the key
-- index in id order again.
CREATE INDEX IF NOT EXISTS "{prefix}outbox_key" ON "{prefix}outbox" (event_type, event_key, id)
    WHERE event_key IS NOT NULL AND status IN ('PENDING', 'IN_PROCESS', 'FAILED');
DROP INDEX IF EXISTS "{prefix}outbox_key_order";
ALTER TABLE "{prefix}dead_letter" DROP COLUMN seq;
