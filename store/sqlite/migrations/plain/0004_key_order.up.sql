-- txbox SQLite schema, version 4: a key's order is its rows' insert order
-- (docs/concepts.md, "Ordering").
--
-- SQLite has one writer, but a producer can wait in busy_timeout with its
-- event id already made while another producer inserts and commits a
-- later id of the same key; id order would then put the waiting
-- producer's event first, although it committed last. The rowid the
-- INSERT assigns is the writers' order: a key's rows are claimed in rowid
-- order. An index on (event_type, event_key) holds the rowid as its last
-- column, so it serves the key walk in that order; it replaces the
-- (event_type, event_key, id) index of version 1. Existing rows keep their
-- rowids, which are their insert order too.

CREATE INDEX IF NOT EXISTS "txbox_outbox_key_order" ON "txbox_outbox" (event_type, event_key)
    WHERE event_key IS NOT NULL AND status IN ('PENDING', 'IN_PROCESS', 'FAILED');
DROP INDEX IF EXISTS "txbox_outbox_key";

-- A dead letter keeps its row's rowid, so a retried dead letter takes its
-- place in its key again (when no row took that rowid meanwhile) instead
-- of going behind the rows it parked.
ALTER TABLE "txbox_dead_letter" ADD COLUMN seq INTEGER;
