-- Reverts 0010_audit.up.sql: drops the audit trail (its indexes go with it).
DROP TABLE IF EXISTS {{table:audit}};
