-- Reverts 0001_init.up.sql (default prefix txbox_, no schema). Drops every
-- txbox table and the events in them.
DROP TABLE IF EXISTS "txbox_lease";
DROP TABLE IF EXISTS "txbox_inbox";
DROP TABLE IF EXISTS "txbox_dead_letter";
DROP TABLE IF EXISTS "txbox_outbox";
DROP FUNCTION IF EXISTS "txbox_uuidv7"();
