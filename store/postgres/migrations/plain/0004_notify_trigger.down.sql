-- Reverts 0003_notify_trigger.up.sql (default prefix txbox_, no schema),
-- with the opt-in trigger that calls the function, if it was created.
DROP TRIGGER IF EXISTS "txbox_outbox_notify" ON "txbox_outbox";
DROP FUNCTION IF EXISTS "txbox_outbox_notify"();
