-- txbox schema version 3 for PostgreSQL 13+: relay heartbeats.
--
-- One small row per relay instance, written every few seconds
-- (relay.heartbeat-interval), so operators can list who is running
-- (docs/operations.md, "Relay instances"). Times come from the database
-- clock: an instance is expired when expires_at < now(), whatever the
-- relays' own clocks say.
CREATE TABLE IF NOT EXISTS "txbox_instance" (
    instance_id text        NOT NULL,
    info        text        NOT NULL DEFAULT '',
    started_at  timestamptz NOT NULL DEFAULT now(),
    seen_at     timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    CONSTRAINT "txbox_instance_pkey" PRIMARY KEY (instance_id)
);
