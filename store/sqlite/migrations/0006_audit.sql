-- txbox SQLite schema, version 6: the audit trail. One row per mutating
-- operator action on dead letters (retry, resolve, delete, redrive, ...),
-- dry runs included, written by the admin API and by `txbox dlq` after
-- the action ran (docs/operations.md, "Audit trail"). at comes from the
-- database clock, in the schema's 'YYYY-MM-DD HH:MM:SS.SSS' UTC form; the
-- relay's cleanup deletes rows older than cleanup.audit-ttl. id is the
-- rowid: each new row gets the largest id plus one, and the cleanup
-- deletes the oldest rows first, so ids only grow while the trail keeps a
-- row (no AUTOINCREMENT, whose sqlite_sequence table no down step could
-- drop). Listings page newest first by id, optionally by action; cleanup
-- walks at.

CREATE TABLE IF NOT EXISTS "{prefix}audit" (
    id       INTEGER PRIMARY KEY,
    at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    who      TEXT    NOT NULL,
    action   TEXT    NOT NULL,
    selector TEXT    NOT NULL DEFAULT '',
    filter   TEXT    NOT NULL DEFAULT '',
    dry_run  INTEGER NOT NULL DEFAULT 0 CHECK (dry_run IN (0, 1)),
    matched  INTEGER NOT NULL DEFAULT 0,
    changed  INTEGER NOT NULL DEFAULT 0,
    error    TEXT
);

CREATE INDEX IF NOT EXISTS "{prefix}audit_action" ON "{prefix}audit" (action, id);

CREATE INDEX IF NOT EXISTS "{prefix}audit_at" ON "{prefix}audit" (at);
