-- Reverts 0008_wal_loss.up.sql: the
-- stream's state forgets its last recreated slot.
ALTER TABLE {{table:wal_state}} DROP COLUMN IF EXISTS lost_confirmed_at;
ALTER TABLE {{table:wal_state}} DROP COLUMN IF EXISTS lost_to;
ALTER TABLE {{table:wal_state}} DROP COLUMN IF EXISTS lost_from;
ALTER TABLE {{table:wal_state}} DROP COLUMN IF EXISTS recreated_at;
