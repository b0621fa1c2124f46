-- txbox MySQL/MariaDB schema, version 2: headers must be a JSON object.
--
-- The relay delivers headers as a map of strings; a plain-SQL producer
-- that writes an array or a scalar (valid JSON) is now refused at insert
-- time by a CHECK instead of being dead-lettered later.
--
-- MySQL and MariaDB check every existing row when a CHECK is added, and
-- have no NOT VALID, so the rows that would make the upgrade fail are
-- dealt with first, as the relay of this version would deal with them
-- (docs/schema.md, "Schema version 2"):
--
-- 1. A PROCESSED row was delivered with no headers (the relay read a
--    non-object as none): record exactly that, {}.
-- 2. Any other row would be dead-lettered by the relay with the reason
--    (one attempt counted, as for a permanent error): move it to the
--    dead-letter table now, with that reason, and delete the moved rows
--    (only those, by id, so a row inserted meanwhile is never deleted
--    unmoved). An IN_PROCESS one may be in a running relay's hands: that
--    relay's finish is then fenced, and the event may have been sent as
--    well as dead-lettered.
-- 3. Add the CHECK. A producer that slipped in another such row meanwhile
--    makes this statement fail; running the migration again deals with it.
--
-- Every statement is safe to run again (MySQL DDL commits on its own);
-- Migrate treats "duplicate CHECK constraint name" as already applied.

UPDATE `txbox_outbox` SET headers = '{}'
WHERE status = 'PROCESSED' AND JSON_TYPE(headers) <> 'OBJECT';

INSERT INTO `txbox_dead_letter`
  (id, event_type, event_key, payload, headers, attempts, last_error, created_at, failed_at, status, resolved_at)
SELECT id, event_type, event_key, payload, headers, attempts + 1,
  CONCAT('not sent: headers are not a JSON object: ', LEFT(CAST(headers AS CHAR), 64), ' (dead-lettered by schema migration 2)'),
  created_at, UTC_TIMESTAMP(6), 'UNRESOLVED', NULL
FROM `txbox_outbox`
WHERE status <> 'PROCESSED' AND JSON_TYPE(headers) <> 'OBJECT'
ON DUPLICATE KEY UPDATE
  event_type = VALUES(event_type), event_key = VALUES(event_key), payload = VALUES(payload),
  headers = VALUES(headers), attempts = VALUES(attempts), last_error = VALUES(last_error),
  created_at = VALUES(created_at), failed_at = VALUES(failed_at), status = 'UNRESOLVED', resolved_at = NULL;

DELETE FROM `txbox_outbox`
WHERE status <> 'PROCESSED' AND JSON_TYPE(headers) <> 'OBJECT'
  AND id IN (SELECT x.id FROM `txbox_dead_letter` x);

ALTER TABLE `txbox_outbox`
  ADD CONSTRAINT `txbox_outbox_headers_chk` CHECK (JSON_TYPE(headers) = 'OBJECT');
