-- txbox schema version 10 for PostgreSQL 13+: the audit trail. One row per
-- mutating operator action on dead letters (retry, resolve, delete,
-- redrive, ...), dry runs included, written by the admin API and by
-- `txbox dlq` after the action ran (docs/operations.md, "Audit trail").
-- at comes from the database clock; the relay's cleanup deletes rows
-- older than cleanup.audit-ttl. Listings page newest first by id (the
-- primary key), optionally by action; cleanup walks at.
CREATE TABLE IF NOT EXISTS {{table:audit}} (
    id       bigint      GENERATED ALWAYS AS IDENTITY,
    at       timestamptz NOT NULL DEFAULT now(),
    who      text        NOT NULL,
    action   text        NOT NULL,
    selector text        NOT NULL DEFAULT '',
    filter   text        NOT NULL DEFAULT '',
    dry_run  boolean     NOT NULL DEFAULT false,
    matched  bigint      NOT NULL DEFAULT 0,
    changed  bigint      NOT NULL DEFAULT 0,
    error    text,
    CONSTRAINT {{index:audit_pkey}} PRIMARY KEY (id)
);

-- The listing of one action, newest first.
CREATE INDEX IF NOT EXISTS {{index:audit_action_idx}}
    ON {{table:audit}} (action, id);

-- Cleanup: the oldest rows first.
CREATE INDEX IF NOT EXISTS {{index:audit_at_idx}}
    ON {{table:audit}} (at);
