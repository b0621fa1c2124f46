-- txbox MySQL/MariaDB schema, version 6: relay heartbeats. One small row
-- per relay instance, written every few seconds (relay.heartbeat-interval),
-- so operators can list who is running (docs/operations.md, "Relay
-- instances"). Times come from the database clock (UTC_TIMESTAMP(6)).
-- Versions 4 and 5 are left free; versions only need to increase.

CREATE TABLE IF NOT EXISTS `txbox_instance` (
  instance_id VARCHAR(200) NOT NULL,
  info TEXT NOT NULL,
  started_at DATETIME(6) NOT NULL,
  seen_at DATETIME(6) NOT NULL,
  expires_at DATETIME(6) NOT NULL,
  PRIMARY KEY (instance_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
