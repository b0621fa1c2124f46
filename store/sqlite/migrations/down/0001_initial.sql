-- Reverts schema version 1. Drops
-- every txbox table and its indexes, with their rows.
DROP TABLE IF EXISTS "{prefix}lease";
DROP TABLE IF EXISTS "{prefix}inbox";
DROP TABLE IF EXISTS "{prefix}dead_letter";
DROP TABLE IF EXISTS "{prefix}outbox";
