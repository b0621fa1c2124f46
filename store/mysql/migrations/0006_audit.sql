-- txbox MySQL/MariaDB schema, version 6: the audit trail. One row per
-- mutating operator action on dead letters (retry, resolve, delete,
-- redrive, ...), dry runs included, written by the admin API and by
-- `txbox dlq` after the action ran (docs/operations.md, "Audit trail").
-- at comes from the database clock (UTC_TIMESTAMP(6)); the relay's cleanup
-- deletes rows older than cleanup.audit-ttl. Listings page newest first by
-- id (the primary key), optionally by action; cleanup walks at.

CREATE TABLE IF NOT EXISTS {{audit}} (
  id BIGINT NOT NULL AUTO_INCREMENT,
  at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
  who VARCHAR(200) NOT NULL,
  action VARCHAR(32) NOT NULL,
  selector VARCHAR(32) NOT NULL DEFAULT '',
  filter TEXT NOT NULL,
  dry_run BOOLEAN NOT NULL DEFAULT FALSE,
  matched BIGINT NOT NULL DEFAULT 0,
  changed BIGINT NOT NULL DEFAULT 0,
  error TEXT NULL,
  PRIMARY KEY (id),
  KEY txbox_audit_action (action, id),
  KEY txbox_audit_at (at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
