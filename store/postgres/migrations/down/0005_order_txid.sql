-- Reverts 0005_order_txid.up.sql: the
-- key index in id order again, without the txid columns.
CREATE INDEX IF NOT EXISTS {{index:outbox_key_idx}}
    ON {{table:outbox}} (event_type, event_key, id)
    WHERE event_key IS NOT NULL AND status IN ('PENDING', 'IN_PROCESS', 'FAILED');
DROP INDEX IF EXISTS {{table:outbox_key_order_idx}};
ALTER TABLE {{table:dead_letter}} DROP COLUMN IF EXISTS txid;
ALTER TABLE {{table:outbox}} DROP COLUMN IF EXISTS txid;
