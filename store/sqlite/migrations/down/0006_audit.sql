-- Reverts schema version 6: drops the audit trail.
DROP TABLE IF EXISTS "{prefix}audit";
