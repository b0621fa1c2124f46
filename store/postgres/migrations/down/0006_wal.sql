-- Reverts 0006_wal.up.sql. Drop the
-- publication and the slot first (docs/operations.md, "WAL mode").
DROP FUNCTION IF EXISTS {{table:emit}}(text, text, bytea, jsonb, timestamptz, uuid);
DROP FUNCTION IF EXISTS {{table:wal_check}}();
DROP TABLE IF EXISTS {{table:wal_guard}};
DROP TABLE IF EXISTS {{table:wal_state}};
ALTER TABLE {{table:outbox}} DROP COLUMN IF EXISTS stream_pos;
