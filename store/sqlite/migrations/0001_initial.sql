-- txbox SQLite schema, version 1.
--
-- In store/sqlite/migrations every table and index name starts with a
-- {prefix} placeholder that Migrate replaces with the validated table
-- prefix. store/sqlite/migrations/plain/0001_initial.up.sql is the same file rendered
-- for the default prefix, txbox_, for users of goose, golang-migrate or
-- atlas (sqlite.Migrations renders any other prefix).
--
-- Ids are TEXT in canonical, lower-case UUID form. txbox writes UUIDv7 made
-- in Go; the column default makes a UUIDv7 in SQL (48-bit Unix milliseconds
-- from the database clock, version 7, variant 10, 74 random bits) so plain
-- SQL inserters that omit the id still get time-ordered ids.
--
-- Timestamps are TEXT 'YYYY-MM-DD HH:MM:SS.SSS' in UTC from
-- strftime('%Y-%m-%d %H:%M:%f','now'): fixed width, so text order is time
-- order and comparisons need no conversion.

CREATE TABLE "{prefix}outbox" (
    id           TEXT    NOT NULL PRIMARY KEY DEFAULT (lower(printf('%08x-%04x-7%03x-%x%03x-%012x',
                     CAST(round(unixepoch('now', 'subsec') * 1000) AS INTEGER) >> 16,
                     CAST(round(unixepoch('now', 'subsec') * 1000) AS INTEGER) & 65535,
                     random() & 4095, 8 | (random() & 3), random() & 4095,
                     random() & 281474976710655))),
    -- The event type pattern, [A-Za-z0-9._:-]{1,200}, checked for
    -- plain-SQL producers too.
    event_type   TEXT    NOT NULL
                     CHECK (length(event_type) BETWEEN 1 AND 200 AND event_type NOT GLOB '*[^A-Za-z0-9._:-]*'),
    event_key    TEXT,
    payload      BLOB    NOT NULL,
    headers      TEXT    NOT NULL DEFAULT '{}',
    status       TEXT    NOT NULL DEFAULT 'PENDING'
                     CHECK (status IN ('PENDING', 'IN_PROCESS', 'PROCESSED', 'FAILED')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    -- Compared as text with the database clock, so a producer that sets it
    -- must use the same 'YYYY-MM-DD HH:MM:SS[.SSS]' UTC form: an ISO 8601
    -- 'T' would sort after every time of that day and delay the event.
    due_at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
                     CHECK (due_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]*'),
    lease_until  TEXT,
    lease_token  TEXT,
    last_error   TEXT,
    created_at   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    processed_at TEXT
);

-- The claim: due PENDING rows of one type in (due_at, id) order. Partial, so
-- a row leaves the index when it is claimed and the claim reads O(batch)
-- entries however many rows were processed before.
CREATE INDEX "{prefix}outbox_claim" ON "{prefix}outbox" (event_type, due_at, id)
    WHERE status = 'PENDING';

-- Lease recovery: IN_PROCESS rows by lease expiry.
CREATE INDEX "{prefix}outbox_lease" ON "{prefix}outbox" (lease_until)
    WHERE status = 'IN_PROCESS';

-- Ordered delivery: the NOT EXISTS probe for an earlier unfinished row of
-- the same type and key. Keyless rows, the common case, stay out of it.
CREATE INDEX "{prefix}outbox_key" ON "{prefix}outbox" (event_type, event_key, id)
    WHERE event_key IS NOT NULL AND status IN ('PENDING', 'IN_PROCESS', 'FAILED');

-- The dead-letter mover's scan of FAILED rows (rare, so the index is tiny).
CREATE INDEX "{prefix}outbox_failed" ON "{prefix}outbox" (id)
    WHERE status = 'FAILED';

-- Retention cleanup of PROCESSED rows.
CREATE INDEX "{prefix}outbox_processed" ON "{prefix}outbox" (processed_at)
    WHERE status = 'PROCESSED';

CREATE TABLE "{prefix}dead_letter" (
    id          TEXT    NOT NULL PRIMARY KEY,
    event_type  TEXT    NOT NULL,
    event_key   TEXT,
    payload     BLOB    NOT NULL,
    headers     TEXT    NOT NULL DEFAULT '{}',
    attempts    INTEGER NOT NULL DEFAULT 0,
    last_error  TEXT,
    created_at  TEXT    NOT NULL,
    failed_at   TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    status      TEXT    NOT NULL DEFAULT 'UNRESOLVED'
                    CHECK (status IN ('UNRESOLVED', 'RESOLVED')),
    resolved_at TEXT
);

-- Listing, newest failure first, with a (failed_at, id) cursor.
CREATE INDEX "{prefix}dead_letter_failed" ON "{prefix}dead_letter" (failed_at, id);

-- Ordered delivery: an unresolved dead letter parks its key.
CREATE INDEX "{prefix}dead_letter_key" ON "{prefix}dead_letter" (event_type, event_key)
    WHERE status = 'UNRESOLVED';

-- Retention cleanup of RESOLVED dead letters.
CREATE INDEX "{prefix}dead_letter_resolved" ON "{prefix}dead_letter" (resolved_at)
    WHERE status = 'RESOLVED';

-- The inbox: ids each consumer has handled. WITHOUT ROWID because the
-- primary key is the whole row.
CREATE TABLE "{prefix}inbox" (
    consumer_name TEXT NOT NULL,
    event_id      TEXT NOT NULL,
    processed_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    PRIMARY KEY (consumer_name, event_id)
) WITHOUT ROWID;

CREATE INDEX "{prefix}inbox_processed" ON "{prefix}inbox" (processed_at);

-- Database leases for jobs that run on one instance at a time (cleanup).
CREATE TABLE "{prefix}lease" (
    name        TEXT NOT NULL PRIMARY KEY,
    holder      TEXT NOT NULL,
    lease_until TEXT NOT NULL
);
