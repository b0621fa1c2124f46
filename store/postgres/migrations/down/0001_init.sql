-- Reverts 0001_init.up.sql. Drops every
-- txbox table and the events in them.
DROP TABLE IF EXISTS {{table:lease}};
DROP TABLE IF EXISTS {{table:inbox}};
DROP TABLE IF EXISTS {{table:dead_letter}};
DROP TABLE IF EXISTS {{table:outbox}};
DROP FUNCTION IF EXISTS {{table:uuidv7}}();
