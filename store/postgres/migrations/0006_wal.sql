-- txbox schema version 6 for PostgreSQL 13+: what WAL mode needs
-- (docs/concepts.md, "WAL mode"). Harmless in table mode: one nullable
-- column and three small objects that nothing uses until `txbox migrate`
-- with database.source wal creates the publication and the slot (which
-- need PostgreSQL 15+ and wal_level = logical; this migration does not).

-- stream_pos is NULL for a row a producer inserted, and set for a row the
-- relay wrote: a spill (an event the stream could not deliver at once,
-- with its place in the stream) or, as 0, an event that belongs to the
-- poller from the start (a future not-before in WAL mode). The
-- publication publishes only rows where it is NULL, so the relay's own
-- writes never come back through the stream.
ALTER TABLE {{table:outbox}} ADD COLUMN IF NOT EXISTS stream_pos bigint;

-- The stream's state: one row per slot, written by `txbox migrate` when it
-- creates the slot and by the relay on each confirm. snapshot is the
-- slot's creation snapshot: a captured row visible in it belongs to the
-- poller, every later one to the stream. confirmed_lsn is the position the
-- relay persisted with its last confirm, in the same transaction as the
-- delete of the confirmed captured rows; the stream restarts there.
CREATE TABLE IF NOT EXISTS {{table:wal_state}} (
    slot_name     text        NOT NULL,
    publication   text        NOT NULL,
    snapshot      pg_snapshot,
    confirmed_lsn pg_lsn      NOT NULL DEFAULT '0/0',
    created_at    timestamptz NOT NULL DEFAULT now(),
    confirmed_at  timestamptz,
    CONSTRAINT {{index:wal_state_pkey}} PRIMARY KEY (slot_name)
);

-- The guard of emits: each emit reads this table (ACCESS SHARE until its
-- transaction ends); dropping the slot first locks it exclusively, so a
-- drop waits for every emit in flight and no emit starts during it.
CREATE TABLE IF NOT EXISTS {{table:wal_guard}} (
    one boolean NOT NULL DEFAULT true,
    CONSTRAINT {{index:wal_guard_pkey}} PRIMARY KEY (one),
    CONSTRAINT {{index:wal_guard_one_chk}} CHECK (one)
);
INSERT INTO {{table:wal_guard}} (one) VALUES (true) ON CONFLICT DO NOTHING;

-- The emit check (docs/schema/postgres.md, "WAL mode messages"): an
-- emitted event must never vanish, and a message is kept only by a slot
-- that exists, decodes this database, is consistent and still has its
-- WAL. The check runs in the emitting statement itself and returns the
-- message prefix, so the emit depends on its result and cannot run before
-- it. Reading the guard takes ACCESS SHARE on it until the transaction
-- ends: a slot drop, which locks the guard exclusively first, waits for
-- every emit in flight, and an emit that comes during the drop waits,
-- then finds the slot gone. pg_replication_slots is shared memory, not a
-- snapshot, so the check sees a drop even in a REPEATABLE READ
-- transaction. Every failure is tagged with the constraint name
-- txbox_wal_check: SQLSTATE 42704 (undefined_object) when there is no
-- slot, 55000 (object_not_in_prerequisite_state) when the slot is not
-- ready.
CREATE OR REPLACE FUNCTION {{table:wal_check}}() RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    st record;
    s record;
    n integer := 0;
BEGIN
    PERFORM 1 FROM {{table:wal_guard}};
    FOR st IN SELECT w.slot_name FROM {{table:wal_state}} w LOOP
        n := n + 1;
        SELECT r.database, r.confirmed_flush_lsn, r.wal_status INTO s
        FROM pg_catalog.pg_replication_slots r WHERE r.slot_name = st.slot_name;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'txbox WAL mode: slot % does not exist', st.slot_name
                USING ERRCODE = '42704', CONSTRAINT = 'txbox_wal_check',
                      HINT = 'The slot was dropped: run txbox migrate with database.source wal to create it again, or switch the producers to database.source table.';
        END IF;
        IF s.database IS DISTINCT FROM pg_catalog.current_database() THEN
            RAISE EXCEPTION 'txbox WAL mode: slot % decodes database %, not %', st.slot_name, coalesce(s.database::text, '(none: a physical slot)'), pg_catalog.current_database()
                USING ERRCODE = '55000', CONSTRAINT = 'txbox_wal_check',
                      HINT = 'The slot must be a logical slot of this database: check database.source wal and the slot name.';
        END IF;
        IF s.confirmed_flush_lsn IS NULL THEN
            RAISE EXCEPTION 'txbox WAL mode: slot % is not consistent yet', st.slot_name
                USING ERRCODE = '55000', CONSTRAINT = 'txbox_wal_check',
                      HINT = 'The slot is being created and waits for the transactions open when it started; retry once they end.';
        END IF;
        IF s.wal_status IS NULL OR s.wal_status NOT IN ('reserved', 'extended') THEN
            RAISE EXCEPTION 'txbox WAL mode: slot % has wal_status %, not reserved or extended', st.slot_name, coalesce(s.wal_status, 'NULL')
                USING ERRCODE = '55000', CONSTRAINT = 'txbox_wal_check',
                      HINT = 'The server may remove WAL the slot needs (max_slot_wal_keep_size): the relay is too far behind; see docs/operations.md, "WAL mode".';
        END IF;
    END LOOP;
    IF n = 0 THEN
        RAISE EXCEPTION 'WAL mode has no slot: run txbox migrate with database.source wal'
            USING ERRCODE = '42704', CONSTRAINT = 'txbox_wal_check',
                  HINT = 'Until the slot exists, an emitted event would be kept by nothing.';
    END IF;
    RETURN 'txbox:' || '{{table:outbox}}';
END
$$;

-- WAL mode's publish for plain-SQL producers in any language: the same
-- message (walmsg version 1) the Go publisher writes, checked by
-- wal_check above in the same statement. An event with a future
-- not_before goes into the outbox table instead, with stream_pos = 0: it
-- belongs to the poller, and the publication leaves it out.
CREATE OR REPLACE FUNCTION {{table:emit}}(
    event_type text,
    event_key  text,
    payload    bytea,
    headers    jsonb       DEFAULT '{}',
    not_before timestamptz DEFAULT NULL,
    id         uuid        DEFAULT {{table:uuidv7}}()
) RETURNS uuid
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
DECLARE
    t bytea;
    k bytea;
    h bytea := ''::bytea;
BEGIN
    IF event_type IS NULL OR event_type !~ '^[A-Za-z0-9._:-]{1,200}$' THEN
        RAISE EXCEPTION 'txbox emit: event_type % is not 1 to 200 characters from [A-Za-z0-9._:-]', coalesce(quote_literal(event_type), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF payload IS NULL OR id IS NULL THEN
        RAISE EXCEPTION 'txbox emit: payload and id must not be NULL' USING ERRCODE = '22004';
    END IF;
    headers := coalesce(headers, '{}'::jsonb);
    IF jsonb_typeof(headers) <> 'object'
       OR EXISTS (SELECT 1 FROM jsonb_each(headers) e WHERE jsonb_typeof(e.value) <> 'string') THEN
        RAISE EXCEPTION 'txbox emit: headers must be a JSON object of strings, not %', headers
            USING ERRCODE = '22023';
    END IF;
    IF not_before > now() THEN
        INSERT INTO {{table:outbox}} (id, event_type, event_key, payload, headers, due_at, stream_pos)
        VALUES (id, event_type, NULLIF(event_key, ''), payload, headers, not_before, 0);
        RETURN id;
    END IF;
    t := convert_to(event_type, 'UTF8');
    k := convert_to(coalesce(event_key, ''), 'UTF8');
    IF headers <> '{}'::jsonb THEN
        h := convert_to(headers::text, 'UTF8');
    END IF;
    PERFORM pg_catalog.pg_logical_emit_message(true, {{table:wal_check}}(),
        '\x01'::bytea
        || uuid_send(id)
        || int8send(floor(extract(epoch FROM now()) * 1000000)::bigint)
        || int8send(coalesce(floor(extract(epoch FROM not_before) * 1000000)::bigint, 0))
        || int4send(length(t)) || t
        || int4send(length(k)) || k
        || int4send(length(h)) || h
        || payload);
    RETURN id;
END
$$;

-- Version 5 dropped the replaced key index by its bare name, which
-- resolves through search_path: with a schema configured it left the
-- schema's own index in place (the planner kept maintaining it). Drop it
-- by its qualified name.
DROP INDEX IF EXISTS {{table:outbox_key_idx}};
