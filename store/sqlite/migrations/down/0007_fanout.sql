-- Reverts schema version 7: the rows forget their routes. Run it only
-- when no row has a route: the rows of a fan-out event's further routes
-- would otherwise stay, as events of their own.
DROP INDEX IF EXISTS "{prefix}dead_letter_key";
CREATE INDEX IF NOT EXISTS "{prefix}dead_letter_key" ON "{prefix}dead_letter" (event_type, event_key)
    WHERE status = 'UNRESOLVED';
DROP INDEX IF EXISTS "{prefix}outbox_key_order";
CREATE INDEX IF NOT EXISTS "{prefix}outbox_key_order" ON "{prefix}outbox" (event_type, event_key)
    WHERE event_key IS NOT NULL AND status IN ('PENDING', 'IN_PROCESS', 'FAILED');
DROP INDEX IF EXISTS "{prefix}outbox_claim";
CREATE INDEX IF NOT EXISTS "{prefix}outbox_claim" ON "{prefix}outbox" (event_type, due_at, id)
    WHERE status = 'PENDING';
ALTER TABLE "{prefix}dead_letter" DROP COLUMN event_id;
ALTER TABLE "{prefix}dead_letter" DROP COLUMN route;
ALTER TABLE "{prefix}outbox" DROP COLUMN event_id;
ALTER TABLE "{prefix}outbox" DROP COLUMN route;
