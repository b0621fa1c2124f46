-- Reverts 0001_init.up.sql. Drops every txbox
-- table and the events in them.
DROP TABLE IF EXISTS {{lease}};
DROP TABLE IF EXISTS {{inbox}};
DROP TABLE IF EXISTS {{dead_letter}};
DROP TABLE IF EXISTS {{outbox}};
