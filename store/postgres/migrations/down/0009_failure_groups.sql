-- Reverts 0009_failure_groups.up.sql: dead letters forget their
-- fingerprints.
DROP INDEX IF EXISTS {{index:dead_letter_unprinted_idx}};
DROP INDEX IF EXISTS {{index:dead_letter_group_idx}};
ALTER TABLE {{table:dead_letter}} DROP COLUMN IF EXISTS destination;
ALTER TABLE {{table:dead_letter}} DROP COLUMN IF EXISTS failure_message;
ALTER TABLE {{table:dead_letter}} DROP COLUMN IF EXISTS failure_class;
ALTER TABLE {{table:dead_letter}} DROP COLUMN IF EXISTS fingerprint;
