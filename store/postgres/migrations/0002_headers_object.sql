-- txbox schema version 2 for PostgreSQL 13+: headers must be a JSON object.
--
-- The relay delivers headers as a map of strings; a plain-SQL producer
-- that writes an array or a scalar (valid jsonb) is now refused at insert
-- time with a check violation instead of being dead-lettered later.
--
-- NOT VALID: rows written before this migration are not checked, so an
-- upgrade never fails on them and takes no long lock scanning the table.
-- The relay dead-letters any such row it claims, with the reason, and
-- delivers the rest of its batch (docs/schema.md, "Schema version 2").
-- Once those are gone, `ALTER TABLE ... VALIDATE CONSTRAINT` may be run by
-- hand; nothing requires it.
ALTER TABLE {{table:outbox}}
    ADD CONSTRAINT {{index:outbox_headers_chk}} CHECK (jsonb_typeof(headers) = 'object') NOT VALID;
