-- Reverts 0003_instance.up.sql (default prefix txbox_, no schema).
DROP TABLE IF EXISTS "txbox_instance";
