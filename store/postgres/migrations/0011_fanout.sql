-- txbox schema version 11 for PostgreSQL 13+: fan-out routes
-- (docs/concepts.md, "Fan-out"). An event of a type with several routes
-- is one outbox row per route: it is inserted as one row with route ''
-- and the relay's expander gives that row the first route and adds a copy
-- per further route, whose event_id is the original row's id (the id the
-- consumers see on every route). A type with one route keeps route ''.
--
-- Both columns have a constant default (NULL for event_id), so adding
-- them rewrites nothing. The three indexes below are rebuilt with the
-- route after the type: on a large outbox this reads the table once per
-- index (docs/upgrading.md, "Version 11").
ALTER TABLE {{table:outbox}} ADD COLUMN IF NOT EXISTS route text NOT NULL DEFAULT '';
ALTER TABLE {{table:outbox}} ADD COLUMN IF NOT EXISTS event_id uuid;

-- A dead letter belongs to one route of its event; a retry sends it to
-- that route only.
ALTER TABLE {{table:dead_letter}} ADD COLUMN IF NOT EXISTS route text NOT NULL DEFAULT '';
ALTER TABLE {{table:dead_letter}} ADD COLUMN IF NOT EXISTS event_id uuid;

-- The claim: due PENDING rows of one type and route in (due_at, id)
-- order. It replaces the (event_type, due_at, id) index of version 1.
CREATE INDEX IF NOT EXISTS {{index:outbox_route_claim_idx}}
    ON {{table:outbox}} (event_type, route, due_at, id) WHERE status = 'PENDING';
DROP INDEX IF EXISTS {{table:outbox_claim_idx}};

-- Ordered delivery: a route's keys, each in (txid, id) order. It
-- replaces the (event_type, event_key, txid, id) index of version 5.
CREATE INDEX IF NOT EXISTS {{index:outbox_route_key_idx}}
    ON {{table:outbox}} (event_type, route, event_key, txid, id)
    WHERE event_key IS NOT NULL AND status IN ('PENDING', 'IN_PROCESS', 'FAILED');
DROP INDEX IF EXISTS {{table:outbox_key_order_idx}};

-- An unresolved dead letter parks its key on its route, and a route-less
-- one on every route: the route is last, so the claim's probe reads one
-- key's entries for both routes at once and the stream's loose index
-- scan over (event_type, event_key) stays one probe per key. It replaces
-- the (event_type, event_key) index of version 1.
CREATE INDEX IF NOT EXISTS {{index:dead_letter_route_park_idx}}
    ON {{table:dead_letter}} (event_type, event_key, route)
    WHERE event_key IS NOT NULL AND status = 'UNRESOLVED';
DROP INDEX IF EXISTS {{table:dead_letter_park_idx}};
