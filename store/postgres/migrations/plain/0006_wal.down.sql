-- Reverts 0006_wal.up.sql (default prefix txbox_, no schema). Drop the
-- publication and the slot first (docs/operations.md, "WAL mode").
DROP FUNCTION IF EXISTS "txbox_emit"(text, text, bytea, jsonb, timestamptz, uuid);
DROP FUNCTION IF EXISTS "txbox_wal_check"();
DROP TABLE IF EXISTS "txbox_wal_guard";
DROP TABLE IF EXISTS "txbox_wal_state";
ALTER TABLE "txbox_outbox" DROP COLUMN IF EXISTS stream_pos;
