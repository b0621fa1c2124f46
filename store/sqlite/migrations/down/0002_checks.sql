-- Reverts schema version 2.
DROP TRIGGER IF EXISTS "{prefix}outbox_check_update";
DROP TRIGGER IF EXISTS "{prefix}outbox_check_insert";
