-- txbox MySQL/MariaDB schema, version 1.
--
-- Identifiers in double braces are replaced by validated, backtick-quoted
-- table names when the driver renders this file; sql/0001_init.sql holds
-- the rendering with the default prefix for goose / golang-migrate / atlas.
--
-- Every statement is CREATE TABLE IF NOT EXISTS: MySQL DDL commits on its
-- own, so a migration interrupted half way must be safe to run again.

CREATE TABLE IF NOT EXISTS `txbox_outbox` (
  -- Default: a UUIDv7 built from the UTC clock (48-bit millisecond prefix,
  -- then random bits), so plain-SQL inserters get time-ordered ids that
  -- sort with the library's ids. Lowercase canonical text.
  id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT (LOWER(CONCAT(
    SUBSTR(LPAD(HEX(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000), 12, '0'), 1, 8), '-',
    SUBSTR(LPAD(HEX(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000), 12, '0'), 9, 4), '-7',
    SUBSTR(MD5(CONCAT(UUID(), RAND())), 1, 3), '-',
    ELT(1 + FLOOR(RAND() * 4), '8', '9', 'a', 'b'),
    SUBSTR(MD5(CONCAT(UUID(), RAND())), 1, 3), '-',
    SUBSTR(MD5(CONCAT(UUID(), RAND())), 1, 12)))),
  event_type VARCHAR(200) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  event_key VARBINARY(1024) NULL,
  payload LONGBLOB NOT NULL,
  headers JSON NOT NULL DEFAULT ('{}'),
  status VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'PENDING',
  attempts INT NOT NULL DEFAULT 0,
  due_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
  lease_until DATETIME(6) NULL,
  lease_token CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL,
  last_error TEXT NULL,
  created_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
  processed_at DATETIME(6) NULL,
  PRIMARY KEY (id),
  -- The claim: status = 'PENDING' AND event_type = ? AND due_at <= now
  -- ORDER BY due_at, id. Status leads so that the IN_PROCESS entries (lease
  -- recovery), the FAILED ones (dead-letter mover) and the loose scan of
  -- pending types are all short ranges of this one index.
  KEY txbox_claim (status, event_type, due_at, id),
  -- Ordered delivery: is there an earlier PENDING/IN_PROCESS/FAILED row of
  -- this type and key? Status is in the key so PROCESSED history is skipped.
  KEY txbox_order (event_type, event_key, status, id),
  -- Retention cleanup of PROCESSED rows, oldest first. Not (status, ...):
  -- a claim would then move every claimed row's entry in this index too.
  -- processed_at is NULL until a row is acked (or fails for good), so a
  -- claim leaves this index alone.
  KEY txbox_cleanup (processed_at),
  CHECK (status IN ('PENDING', 'IN_PROCESS', 'PROCESSED', 'FAILED')),
  CHECK (attempts >= 0),
  -- A row the relay could not parse would wedge its event type: refuse
  -- malformed ids (uppercase too, which would sort wrongly) and event
  -- types at insert time instead. ascii_bin makes REGEXP case-sensitive.
  CHECK (id REGEXP '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'),
  CHECK (event_type REGEXP '^[A-Za-z0-9._:-]{1,200}$')
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS `txbox_dead_letter` (
  id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  event_type VARCHAR(200) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  event_key VARBINARY(1024) NULL,
  payload LONGBLOB NOT NULL,
  headers JSON NOT NULL DEFAULT ('{}'),
  attempts INT NOT NULL DEFAULT 0,
  last_error TEXT NULL,
  created_at DATETIME(6) NOT NULL,
  failed_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
  status VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'UNRESOLVED',
  resolved_at DATETIME(6) NULL,
  PRIMARY KEY (id),
  -- Listing: newest failure first, keyset cursor (failed_at, id).
  KEY txbox_failed (failed_at, id),
  -- Ordered delivery: an unresolved dead letter parks its type and key.
  KEY txbox_parked (event_type, event_key, status),
  KEY txbox_cleanup (status, resolved_at),
  CHECK (status IN ('UNRESOLVED', 'RESOLVED'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS `txbox_inbox` (
  consumer_name VARCHAR(200) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  event_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  processed_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
  PRIMARY KEY (consumer_name, event_id),
  KEY txbox_processed (processed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS `txbox_lease` (
  name VARCHAR(200) NOT NULL,
  holder VARCHAR(200) NOT NULL,
  expires_at DATETIME(6) NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
