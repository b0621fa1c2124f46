-- Reverts txbox SQLite schema version 1 (default prefix txbox_). Drops
-- every txbox table and its indexes, with their rows.
DROP TABLE IF EXISTS "txbox_lease";
DROP TABLE IF EXISTS "txbox_inbox";
DROP TABLE IF EXISTS "txbox_dead_letter";
DROP TABLE IF EXISTS "txbox_outbox";
