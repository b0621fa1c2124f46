-- txbox schema version 7 for PostgreSQL 13+: txbox_emit emits an event
-- with a future not_before like any other (docs/schema/postgres.md, "WAL
-- mode messages"), with not_before in the message and the emit check in
-- the same statement. The relay writes such an event into the outbox
-- table itself, at its place in the stream, so a key's later events can
-- no longer stream past it. Version 6 inserted it into the table at once
-- with stream_pos = 0, which the stream never saw. Rows it wrote that way
-- keep working: stream_pos = 0 still marks a row the poller owns (a
-- retried dead letter is one too).
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
    -- The message carries microseconds since the epoch: an infinity has
    -- none (version 6 put it into the table, due never).
    IF NOT isfinite(not_before) THEN
        RAISE EXCEPTION 'txbox emit: not_before % is not a finite time', not_before
            USING ERRCODE = '22023';
    END IF;
    headers := coalesce(headers, '{}'::jsonb);
    IF jsonb_typeof(headers) <> 'object'
       OR EXISTS (SELECT 1 FROM jsonb_each(headers) e WHERE jsonb_typeof(e.value) <> 'string') THEN
        RAISE EXCEPTION 'txbox emit: headers must be a JSON object of strings, not %', headers
            USING ERRCODE = '22023';
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
