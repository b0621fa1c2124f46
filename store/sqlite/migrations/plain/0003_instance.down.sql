-- Reverts txbox SQLite schema version 5 (default prefix txbox_).
DROP TABLE IF EXISTS "txbox_instance";
