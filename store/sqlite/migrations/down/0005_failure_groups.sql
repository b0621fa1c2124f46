-- Reverts schema version 5: dead letters forget their fingerprints.
DROP INDEX IF EXISTS "{prefix}dead_letter_unprinted";
DROP INDEX IF EXISTS "{prefix}dead_letter_group";
ALTER TABLE "{prefix}dead_letter" DROP COLUMN destination;
ALTER TABLE "{prefix}dead_letter" DROP COLUMN failure_message;
ALTER TABLE "{prefix}dead_letter" DROP COLUMN failure_class;
ALTER TABLE "{prefix}dead_letter" DROP COLUMN fingerprint;
