-- Reverts 0002_headers_object.up.sql.
ALTER TABLE {{table:outbox}} DROP CONSTRAINT IF EXISTS {{index:outbox_headers_chk}};
