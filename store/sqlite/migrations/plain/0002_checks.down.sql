-- Reverts txbox SQLite schema version 2 (default prefix txbox_).
DROP TRIGGER IF EXISTS "txbox_outbox_check_update";
DROP TRIGGER IF EXISTS "txbox_outbox_check_insert";
