-- Reverts 0011_fanout.up.sql: the indexes of versions 1 and 5 again, and
-- no routes. Run it only on an outbox without route rows left (every
-- fan-out type drained): the route copies would become plain rows of
-- their type, delivered once more each.
-- txbox:restore 0001_init CREATE INDEX IF NOT EXISTS {{index:outbox_claim_idx}}
-- txbox:restore 0005_order_txid CREATE INDEX IF NOT EXISTS {{index:outbox_key_order_idx}}
-- txbox:restore 0001_init CREATE INDEX IF NOT EXISTS {{index:dead_letter_park_idx}}
DROP INDEX IF EXISTS {{table:dead_letter_route_park_idx}};
DROP INDEX IF EXISTS {{table:outbox_route_key_idx}};
DROP INDEX IF EXISTS {{table:outbox_route_claim_idx}};
ALTER TABLE {{table:dead_letter}} DROP COLUMN IF EXISTS event_id;
ALTER TABLE {{table:dead_letter}} DROP COLUMN IF EXISTS route;
ALTER TABLE {{table:outbox}} DROP COLUMN IF EXISTS event_id;
ALTER TABLE {{table:outbox}} DROP COLUMN IF EXISTS route;
