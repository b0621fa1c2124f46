-- txbox SQLite schema, version 5: relay heartbeats. One small row per
-- relay instance, written every few seconds (relay.heartbeat-interval), so
-- operators can list who is running (docs/operations.md, "Relay
-- instances"). Times come from the database clock, in the schema's
-- 'YYYY-MM-DD HH:MM:SS.SSS' UTC form. Versions 3 and 4 are left free;
-- versions only need to increase.

CREATE TABLE IF NOT EXISTS "txbox_instance" (
    instance_id TEXT NOT NULL PRIMARY KEY,
    info        TEXT NOT NULL DEFAULT '',
    started_at  TEXT NOT NULL,
    seen_at     TEXT NOT NULL,
    expires_at  TEXT NOT NULL
);
