-- Reverts 0004_instance.up.sql. Drops the relay
-- heartbeat table.
DROP TABLE IF EXISTS {{instance}};
