-- Reverts 0005_order_txid.up.sql (default prefix txbox_, no schema): the
-- key index in id order again, without the txid columns.
CREATE INDEX IF NOT EXISTS "txbox_outbox_key_idx"
    ON "txbox_outbox" (event_type, event_key, id)
    WHERE event_key IS NOT NULL AND status IN ('PENDING', 'IN_PROCESS', 'FAILED');
DROP INDEX IF EXISTS "txbox_outbox_key_order_idx";
ALTER TABLE "txbox_dead_letter" DROP COLUMN IF EXISTS txid;
ALTER TABLE "txbox_outbox" DROP COLUMN IF EXISTS txid;
