-- txbox schema version 3 for PostgreSQL 13+: the wake-up trigger's
-- function, for producers that insert outbox rows with plain SQL.
--
-- This migration only creates the function; nothing calls it until the
-- opt-in trigger is created (postgres.Config.NotifyTrigger, or
-- database.notify-trigger: true for `txbox migrate`; docs/schema/postgres.md,
-- "Wake-ups for plain-SQL producers"). The trigger runs it once per
-- INSERT or COPY statement, after the statement, with the statement's new
-- rows as the transition table new_rows: one pg_notify per distinct event
-- type of the statement on the channel given as the trigger's argument.
-- Notifications are delivered when the transaction commits and never if
-- it rolls back, and PostgreSQL folds identical ones within a transaction
-- (those of txbox's own publisher included).
CREATE OR REPLACE FUNCTION "txbox_outbox_notify"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_ARGV[0], t.event_type) FROM (SELECT DISTINCT event_type FROM new_rows) t;
    RETURN NULL;
END
$$;
