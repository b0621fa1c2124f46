-- Reverts 0003_instance.up.sql.
DROP TABLE IF EXISTS {{table:instance}};
