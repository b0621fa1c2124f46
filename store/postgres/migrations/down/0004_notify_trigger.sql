-- Reverts 0004_notify_trigger.up.sql,
-- with the opt-in trigger that calls the function, if it was created.
DROP TRIGGER IF EXISTS {{index:outbox_notify}} ON {{table:outbox}};
DROP FUNCTION IF EXISTS {{table:outbox_notify}}();
