-- Reverts 0007_emit_deferred.up.sql (default prefix txbox_, no schema):
-- txbox_emit as version 6 made it, which inserts an event with a future
-- not_before into txbox_outbox with stream_pos = 0 instead of emitting it.
-- Only plain-SQL producers change: the Go publisher of this build emits
-- such events whatever the schema version.
CREATE OR REPLACE FUNCTION "txbox_emit"(
    event_type text,
    event_key  text,
    payload    bytea,
    headers    jsonb       DEFAULT '{}',
    not_before timestamptz DEFAULT NULL,
    id         uuid        DEFAULT "txbox_uuidv7"()
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
        INSERT INTO "txbox_outbox" (id, event_type, event_key, payload, headers, due_at, stream_pos)
        VALUES (id, event_type, NULLIF(event_key, ''), payload, headers, not_before, 0);
        RETURN id;
    END IF;
    t := convert_to(event_type, 'UTF8');
    k := convert_to(coalesce(event_key, ''), 'UTF8');
    IF headers <> '{}'::jsonb THEN
        h := convert_to(headers::text, 'UTF8');
    END IF;
    PERFORM pg_catalog.pg_logical_emit_message(true, "txbox_wal_check"(),
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
