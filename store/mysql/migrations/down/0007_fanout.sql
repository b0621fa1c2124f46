-- Reverts 0007_fanout.up.sql: the rows forget their routes. Run it only
-- when no row has a route: the rows of a fan-out event's further routes
-- would otherwise stay, as events of their own.
ALTER TABLE {{dead_letter}}
  DROP INDEX txbox_parked, ADD INDEX txbox_parked (event_type, event_key, status);

ALTER TABLE {{dead_letter}}
  DROP COLUMN event_id,
  DROP COLUMN route;

ALTER TABLE {{outbox}}
  DROP INDEX txbox_claim, ADD INDEX txbox_claim (status, event_type, due_at, id),
  DROP INDEX txbox_order, ADD INDEX txbox_order (event_type, status, event_key, id);

ALTER TABLE {{outbox}}
  DROP COLUMN event_id,
  DROP COLUMN route;
