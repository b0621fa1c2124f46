-- txbox MySQL/MariaDB schema, version 7: fan-out routes (docs/concepts.md,
-- "Fan-out"). One outbox row per (event, route): a fan-out event is
-- inserted as one row with route '' and the relay's expander turns it
-- into one row per route. The event's own row takes the first route; the
-- rows of the further routes have their own id (the event's, last byte
-- changed, so they keep its place in key order by id) and event_id, the
-- id the consumers see. The dead letters keep both, so a retry goes back
-- to its route alone.
--
-- route leads the claim's and the key walk's indexes after the type, so a
-- route's claim reads its own rows only; the park check of a route reads
-- the dead letters of its key with its route or ''.
--
-- MySQL commits each ALTER on its own, and a run interrupted before the
-- version was recorded is run again: each statement adds all its columns
-- or none (a duplicate column then counts as applied), and the index
-- statements drop and re-create, which does the same twice.

ALTER TABLE {{outbox}}
  ADD COLUMN route VARCHAR(200) NOT NULL DEFAULT '',
  ADD COLUMN event_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL;

ALTER TABLE {{outbox}}
  DROP INDEX txbox_claim, ADD INDEX txbox_claim (status, event_type, route, due_at, id),
  DROP INDEX txbox_order, ADD INDEX txbox_order (event_type, route, status, event_key, id);

ALTER TABLE {{dead_letter}}
  ADD COLUMN route VARCHAR(200) NOT NULL DEFAULT '',
  ADD COLUMN event_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL;

ALTER TABLE {{dead_letter}}
  DROP INDEX txbox_parked, ADD INDEX txbox_parked (event_type, event_key, status, route);
