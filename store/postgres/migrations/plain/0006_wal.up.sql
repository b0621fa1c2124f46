-- txbox schema version 6 for PostgreSQL 13+: what WAL mode needs
-- (docs/concepts.md, "WAL mode"). Harmless in table mode: one nullable
-- column and three small objects that nothing uses until `txbox migrate`
-- with database.source wal creates the publication and the slot (which
-- need PostgreSQL 15+ and wal_level = logical; this migration does not).

-- stream_pos is NULL for a row a producer inserted, and set for a row the
-- relay wrote: a spill (an event the stream could not deliver at once,
-- with its place in the stream) or, as 0, an event that belongs to the
-- poller from the start (a future not-before in WAL mode). The
-- publication publishes only rows where it is NULL, so the relay's own
-- writes never come back through the stream.
ALTER TABLE "txbox_outbox" ADD COLUMN IF NOT EXISTS stream_pos bigint;

-- The stream's state: one row per slot, written by `txbox migrate` when it
-- creates the slot and by the relay on each confirm. snapshot is the
-- slot's creation snapshot: a captured row visible in it belongs to the
-- poller, every later one to the stream. confirmed_lsn is the position the
-- relay persisted with its last confirm, in the same transaction as the
-- delete of the confirmed captured rows; the stream restarts there.
CREATE TABLE IF NOT EXISTS "txbox_wal_state" (
    slot_name     text        NOT NULL,
    publication   text        NOT NULL,
    snapshot      pg_snapshot,
    confirmed_lsn pg_lsn      NOT NULL DEFAULT '0/0',
    created_at    timestamptz NOT NULL DEFAULT now(),
    confirmed_at  timestamptz,
    CONSTRAINT "txbox_wal_state_pkey" PRIMARY KEY (slot_name)
);

-- The guard of emits: each emit reads this table (ACCESS SHARE until its
-- transaction ends); dropping the slot first locks it exclusively, so a
-- drop waits for every emit in flight and no emit starts during it.
CREATE TABLE IF NOT EXISTS "txbox_wal_guard" (
    one boolean NOT NULL DEFAULT true,
    CONSTRAINT "txbox_wal_guard_pkey" PRIMARY KEY (one),
    CONSTRAINT "txbox_wal_guard_one_chk" CHECK (one)
);
INSERT INTO "txbox_wal_guard" (one) VALUES (true) ON CONFLICT DO NOTHING;
