-- txbox SQLite schema, version 2: what the relay reads back must be
-- readable.
--
-- SQLite stores any value in any column, and a plain-SQL producer may
-- write headers that are not a JSON object, an id that is not a canonical
-- lower-case UUID (the finish finds rows by that text) or a created_at in
-- another format. The relay used to fail the whole claim on such a row.
-- These triggers refuse them at insert (and update) time, as the CHECK
-- constraints of the other dialects do.
--
-- Triggers rather than CHECK constraints: SQLite can add a CHECK only by
-- rebuilding the table, which would fail on an existing bad row. Rows
-- written before this migration are not checked; the relay dead-letters
-- any such row it claims, with the reason, and delivers the rest of its
-- batch (docs/schema.md, "Schema version 2").
--
-- For goose, wrap each CREATE TRIGGER in StatementBegin / StatementEnd:
-- its body contains a semicolon.

CREATE TRIGGER IF NOT EXISTS "txbox_outbox_check_insert" BEFORE INSERT ON "txbox_outbox"
FOR EACH ROW WHEN CASE WHEN json_valid(NEW.headers) THEN json_type(NEW.headers) END IS NOT 'object'
    OR NEW.id NOT GLOB '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'
    OR NEW.created_at NOT GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]*'
BEGIN
    SELECT RAISE(ABORT, 'txbox: headers must be a JSON object, id a lower-case UUID and created_at a UTC ''YYYY-MM-DD HH:MM:SS[.SSS]'' time');
END;

CREATE TRIGGER IF NOT EXISTS "txbox_outbox_check_update" BEFORE UPDATE OF headers, id, created_at ON "txbox_outbox"
FOR EACH ROW WHEN CASE WHEN json_valid(NEW.headers) THEN json_type(NEW.headers) END IS NOT 'object'
    OR NEW.id NOT GLOB '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'
    OR NEW.created_at NOT GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]*'
BEGIN
    SELECT RAISE(ABORT, 'txbox: headers must be a JSON object, id a lower-case UUID and created_at a UTC ''YYYY-MM-DD HH:MM:SS[.SSS]'' time');
END;
