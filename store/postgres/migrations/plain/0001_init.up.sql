-- txbox schema version 1 for PostgreSQL 13+.
--
-- Names use the default prefix txbox_ and no schema. The embedded copy in
-- store/postgres/migrations renders them for the configured schema and
-- prefix, from identifiers that passed store.ValidateIdentifier.

-- A time-ordered UUIDv7 for plain-SQL producers: PostgreSQL before 18 has
-- no uuidv7(). The first 48 bits are the Unix time in milliseconds, the
-- version nibble is 7, the next 12 bits are the sub-millisecond fraction
-- (RFC 9562 method 3, so ids made microseconds apart still sort in time
-- order), the rest is gen_random_uuid()'s randomness (which already
-- carries the RFC 4122 variant bits).
CREATE OR REPLACE FUNCTION "txbox_uuidv7"() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
  SELECT encode(
    overlay(uuid_send(gen_random_uuid())
            placing substring(int8send(t.us / 1000) FROM 3)
                    || int2send((28672 + (t.us % 1000) * 4096 / 1000)::int2)
            FROM 1 FOR 8),
    'hex')::uuid
  FROM (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS us) t
$$;

-- The outbox: one row per event. Rows change state three times (insert,
-- claim, finish), so the table leaves room on each page for HOT updates
-- and asks autovacuum to visit it far more often than the defaults.
CREATE TABLE IF NOT EXISTS "txbox_outbox" (
    id           uuid        NOT NULL DEFAULT "txbox_uuidv7"(),
    event_type   text        NOT NULL,
    event_key    text,
    payload      bytea       NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    status       text        NOT NULL DEFAULT 'PENDING',
    attempts     integer     NOT NULL DEFAULT 0,
    due_at       timestamptz NOT NULL DEFAULT now(),
    lease_until  timestamptz,
    lease_token  uuid,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    processed_at timestamptz,
    CONSTRAINT "txbox_outbox_pkey" PRIMARY KEY (id),
    CONSTRAINT "txbox_outbox_status_chk" CHECK (status IN ('PENDING', 'IN_PROCESS', 'PROCESSED', 'FAILED')),
    CONSTRAINT "txbox_outbox_type_chk" CHECK (event_type ~ '^[A-Za-z0-9._:-]{1,200}$')
) WITH (
    fillfactor = 75,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- The claim: due PENDING rows of one type in (due_at, id) order. Partial,
-- so it holds only the backlog, not the processed history.
CREATE INDEX IF NOT EXISTS "txbox_outbox_claim_idx"
    ON "txbox_outbox" (event_type, due_at, id) WHERE status = 'PENDING';

-- Lease recovery: IN_PROCESS rows whose lease expired.
CREATE INDEX IF NOT EXISTS "txbox_outbox_lease_idx"
    ON "txbox_outbox" (lease_until) WHERE status = 'IN_PROCESS';

-- Ordered delivery: "is there an earlier unfinished row with my key?"
CREATE INDEX IF NOT EXISTS "txbox_outbox_key_idx"
    ON "txbox_outbox" (event_type, event_key, id)
    WHERE event_key IS NOT NULL AND status IN ('PENDING', 'IN_PROCESS', 'FAILED');

-- The dead-letter mover's input; holds only FAILED rows.
CREATE INDEX IF NOT EXISTS "txbox_outbox_failed_idx"
    ON "txbox_outbox" (id) WHERE status = 'FAILED';

-- Retention cleanup of PROCESSED rows.
CREATE INDEX IF NOT EXISTS "txbox_outbox_processed_idx"
    ON "txbox_outbox" (processed_at) WHERE status = 'PROCESSED';

CREATE TABLE IF NOT EXISTS "txbox_dead_letter" (
    id          uuid        NOT NULL,
    event_type  text        NOT NULL,
    event_key   text,
    payload     bytea       NOT NULL,
    headers     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    attempts    integer     NOT NULL DEFAULT 0,
    last_error  text,
    created_at  timestamptz NOT NULL,
    failed_at   timestamptz NOT NULL DEFAULT now(),
    status      text        NOT NULL DEFAULT 'UNRESOLVED',
    resolved_at timestamptz,
    CONSTRAINT "txbox_dead_letter_pkey" PRIMARY KEY (id),
    CONSTRAINT "txbox_dead_letter_status_chk" CHECK (status IN ('UNRESOLVED', 'RESOLVED'))
);

-- Listing newest failure first with a keyset cursor.
CREATE INDEX IF NOT EXISTS "txbox_dead_letter_list_idx"
    ON "txbox_dead_letter" (failed_at DESC, id DESC);

-- Ordered delivery: an unresolved dead letter parks its key.
CREATE INDEX IF NOT EXISTS "txbox_dead_letter_park_idx"
    ON "txbox_dead_letter" (event_type, event_key)
    WHERE event_key IS NOT NULL AND status = 'UNRESOLVED';

-- Retention cleanup of RESOLVED dead letters.
CREATE INDEX IF NOT EXISTS "txbox_dead_letter_res_idx"
    ON "txbox_dead_letter" (resolved_at) WHERE status = 'RESOLVED';

-- The inbox: ids each consumer has handled.
CREATE TABLE IF NOT EXISTS "txbox_inbox" (
    consumer_name text        NOT NULL,
    event_id      uuid        NOT NULL,
    processed_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT "txbox_inbox_pkey" PRIMARY KEY (consumer_name, event_id)
);

CREATE INDEX IF NOT EXISTS "txbox_inbox_processed_idx"
    ON "txbox_inbox" (processed_at);

-- Database leases for jobs that one instance at a time runs (cleanup).
CREATE TABLE IF NOT EXISTS "txbox_lease" (
    name   text        NOT NULL,
    holder text        NOT NULL,
    until  timestamptz NOT NULL,
    CONSTRAINT "txbox_lease_pkey" PRIMARY KEY (name)
);
