-- txbox SQLite schema, version 5: failure groups of dead letters
-- (docs/operations.md, "Failure groups"). Each dead letter gets a
-- fingerprint: 16 hex digits hashing its destination, event type, failure
-- class and normalised last error, written by the relay after it moves
-- the row here (or by the first listing of the groups, for dead letters
-- stored before this version). The three other columns keep what the
-- fingerprint hashes, readable, for the group's title.

ALTER TABLE "{prefix}dead_letter" ADD COLUMN fingerprint TEXT;
ALTER TABLE "{prefix}dead_letter" ADD COLUMN failure_class TEXT;
ALTER TABLE "{prefix}dead_letter" ADD COLUMN failure_message TEXT;
ALTER TABLE "{prefix}dead_letter" ADD COLUMN destination TEXT;

-- Counting the groups reads this index only (status is in it), and a
-- group's dead letters are walked newest failure first through it.
CREATE INDEX IF NOT EXISTS "{prefix}dead_letter_group" ON "{prefix}dead_letter" (fingerprint, status, failed_at DESC, id DESC)
    WHERE fingerprint IS NOT NULL;

-- The dead letters still to fingerprint.
CREATE INDEX IF NOT EXISTS "{prefix}dead_letter_unprinted" ON "{prefix}dead_letter" (id)
    WHERE fingerprint IS NULL;
