-- txbox MySQL/MariaDB schema, version 5: failure groups of dead letters
-- (docs/operations.md, "Failure groups"). Each dead letter gets a
-- fingerprint: 16 hex digits hashing its destination, event type, failure
-- class and normalised last error, written by the relay after it moves
-- the row here (or by the first listing of the groups, for dead letters
-- stored before this version). The three other columns keep what the
-- fingerprint hashes, readable, for the group's title. One statement, so
-- a run interrupted before its version was recorded either did nothing or
-- all of it (a duplicate column then counts as applied).
--
-- The index serves the count of the groups (status is in it), the walk of
-- one group newest failure first, and the lookup of the dead letters not
-- fingerprinted yet (fingerprint IS NULL).

ALTER TABLE {{dead_letter}}
  ADD COLUMN fingerprint CHAR(16) CHARACTER SET ascii COLLATE ascii_bin NULL,
  ADD COLUMN failure_class VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL,
  ADD COLUMN failure_message VARCHAR(200) NULL,
  ADD COLUMN destination VARCHAR(255) NULL,
  ADD KEY txbox_group (fingerprint, status, failed_at, id);
