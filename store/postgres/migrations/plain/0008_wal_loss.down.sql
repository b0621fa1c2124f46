-- Reverts 0008_wal_loss.up.sql (default prefix txbox_, no schema): the
-- stream's state forgets its last recreated slot.
ALTER TABLE "txbox_wal_state" DROP COLUMN IF EXISTS lost_confirmed_at;
ALTER TABLE "txbox_wal_state" DROP COLUMN IF EXISTS lost_to;
ALTER TABLE "txbox_wal_state" DROP COLUMN IF EXISTS lost_from;
ALTER TABLE "txbox_wal_state" DROP COLUMN IF EXISTS recreated_at;
