-- txbox SQLite schema, version 7: fan-out routes (docs/concepts.md,
-- "Fan-out"). One outbox row per (event, route): a fan-out event is
-- inserted as one row with route '' and the relay's expander turns it
-- into one row per route. The event's own row takes the first route and
-- keeps its rowid; the rows of the further routes are inserted in the
-- events' rowid order, so each route's rows of a key keep the events'
-- order. They have their own id and event_id, the id the consumers see.
-- The dead letters keep both, so a retry goes back to its route alone.
--
-- route follows the type in the claim index and in the key index, so a
-- route's claim and key walk read its own rows only, and a route's park
-- check reads the dead letters of its key with its route or ''.

ALTER TABLE "{prefix}outbox" ADD COLUMN route TEXT NOT NULL DEFAULT '';
ALTER TABLE "{prefix}outbox" ADD COLUMN event_id TEXT;
ALTER TABLE "{prefix}dead_letter" ADD COLUMN route TEXT NOT NULL DEFAULT '';
ALTER TABLE "{prefix}dead_letter" ADD COLUMN event_id TEXT;

DROP INDEX IF EXISTS "{prefix}outbox_claim";
CREATE INDEX IF NOT EXISTS "{prefix}outbox_claim" ON "{prefix}outbox" (event_type, route, due_at, id)
    WHERE status = 'PENDING';

DROP INDEX IF EXISTS "{prefix}outbox_key_order";
CREATE INDEX IF NOT EXISTS "{prefix}outbox_key_order" ON "{prefix}outbox" (event_type, route, event_key)
    WHERE event_key IS NOT NULL AND status IN ('PENDING', 'IN_PROCESS', 'FAILED');

DROP INDEX IF EXISTS "{prefix}dead_letter_key";
CREATE INDEX IF NOT EXISTS "{prefix}dead_letter_key" ON "{prefix}dead_letter" (event_type, event_key, route)
    WHERE status = 'UNRESOLVED';
