-- Reverts 0004_instance.up.sql (default prefix txbox_). Drops the relay
-- heartbeat table.
DROP TABLE IF EXISTS `txbox_instance`;
