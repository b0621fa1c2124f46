-- Reverts 0003_order_index.up.sql: the ordering
-- index gets back its version 1 column order.
ALTER TABLE {{outbox}} DROP INDEX txbox_order, ADD INDEX txbox_order (event_type, event_key, status, id);
