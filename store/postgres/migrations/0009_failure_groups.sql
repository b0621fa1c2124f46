-- txbox schema version 9 for PostgreSQL 13+: failure groups of dead
-- letters (docs/operations.md, "Failure groups"). Each dead letter gets a
-- fingerprint: 16 hex digits hashing its destination, event type, failure
-- class and normalised last error, written by the relay after it moves
-- the row here (or by the first listing of the groups, for dead letters
-- stored before this version). The three other columns keep what the
-- fingerprint hashes, readable, for the group's title.
ALTER TABLE {{table:dead_letter}} ADD COLUMN IF NOT EXISTS fingerprint text;
ALTER TABLE {{table:dead_letter}} ADD COLUMN IF NOT EXISTS failure_class text;
ALTER TABLE {{table:dead_letter}} ADD COLUMN IF NOT EXISTS failure_message text;
ALTER TABLE {{table:dead_letter}} ADD COLUMN IF NOT EXISTS destination text;

-- Counting the groups reads this index only (status is in it), and a
-- group's dead letters are walked newest failure first through it.
CREATE INDEX IF NOT EXISTS {{index:dead_letter_group_idx}}
    ON {{table:dead_letter}} (fingerprint, failed_at DESC, id DESC) INCLUDE (status)
    WHERE fingerprint IS NOT NULL;

-- The dead letters still to fingerprint.
CREATE INDEX IF NOT EXISTS {{index:dead_letter_unprinted_idx}}
    ON {{table:dead_letter}} (id) WHERE fingerprint IS NULL;
