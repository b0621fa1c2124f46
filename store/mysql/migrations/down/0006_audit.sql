-- Reverts 0006_audit.up.sql. Drops the audit
-- trail.
DROP TABLE IF EXISTS {{audit}};
