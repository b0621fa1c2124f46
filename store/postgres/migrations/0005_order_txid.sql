-- txbox schema version 5 for PostgreSQL 13+: the order of a key is its
-- producers' transaction order (docs/concepts.md, "Ordering").
--
-- txid is the top-level transaction id (xid8: 64 bits with the epoch, so
-- it never wraps) of the transaction that inserted the row, set by the
-- column default; a savepoint does not change it. The ordered claim takes
-- a key's rows in (txid, id) order, and takes a key's head only when its
-- txid is below the snapshot's xmin, that is when every transaction that
-- could still insert an earlier row of the key has ended.
--
-- Rows that exist before this migration get txid 0, which orders them
-- before every new row and keeps their id order among themselves: adding
-- a column with a constant default rewrites nothing, and the volatile
-- default applies only to rows inserted afterwards.
ALTER TABLE {{table:outbox}} ADD COLUMN IF NOT EXISTS txid xid8 NOT NULL DEFAULT '0';
ALTER TABLE {{table:outbox}} ALTER COLUMN txid SET DEFAULT pg_current_xact_id();

-- A dead letter keeps its row's txid, so a retried dead letter takes its
-- place in its key again instead of going behind the rows it parked.
ALTER TABLE {{table:dead_letter}} ADD COLUMN IF NOT EXISTS txid xid8 NOT NULL DEFAULT '0';

-- Ordered delivery: a key's rows in (txid, id) order, for the key-head
-- check and the claim's loose index scan over keys. It replaces the
-- (event_type, event_key, id) index of version 1.
CREATE INDEX IF NOT EXISTS {{index:outbox_key_order_idx}}
    ON {{table:outbox}} (event_type, event_key, txid, id)
    WHERE event_key IS NOT NULL AND status IN ('PENDING', 'IN_PROCESS', 'FAILED');
DROP INDEX IF EXISTS {{index:outbox_key_idx}};
