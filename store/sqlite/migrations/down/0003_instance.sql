-- Reverts schema version 3.
DROP TABLE IF EXISTS "{prefix}instance";
