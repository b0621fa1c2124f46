-- txbox schema version 8 for PostgreSQL 13+: the stream's state remembers
-- the last time a relay (or txbox migrate) recreated a lost slot, and what
-- that cost (docs/operations.md, "Failover"). A slot is lost when a
-- failover promotes a standby that has no copy of it (PostgreSQL 15/16,
-- or a 17+ slot that was not yet synced) or when PostgreSQL invalidates
-- it. The events emitted between the last confirmed position (lost_from,
-- confirmed at lost_confirmed_at) and the new slot's start (lost_to) were
-- in WAL no slot decodes: they cannot be recovered from the stream.
-- Captured rows in the outbox table are not lost: the new slot's snapshot
-- hands them to the poller.
ALTER TABLE "txbox_wal_state" ADD COLUMN IF NOT EXISTS recreated_at timestamptz;
ALTER TABLE "txbox_wal_state" ADD COLUMN IF NOT EXISTS lost_from pg_lsn;
ALTER TABLE "txbox_wal_state" ADD COLUMN IF NOT EXISTS lost_to pg_lsn;
ALTER TABLE "txbox_wal_state" ADD COLUMN IF NOT EXISTS lost_confirmed_at timestamptz;
