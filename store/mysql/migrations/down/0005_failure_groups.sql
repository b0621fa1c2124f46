-- Reverts 0005_failure_groups.up.sql: dead letters forget their
-- fingerprints.
ALTER TABLE {{dead_letter}}
  DROP KEY txbox_group,
  DROP COLUMN destination,
  DROP COLUMN failure_message,
  DROP COLUMN failure_class,
  DROP COLUMN fingerprint;
