-- Reverts 0002_headers_object.up.sql: drops the
-- check that headers are a JSON object. The rows the upgrade moved to the
-- dead-letter table stay there.
ALTER TABLE {{outbox}} DROP CONSTRAINT {{outbox_headers_chk}};
