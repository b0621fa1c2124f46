-- Reverts 0002_headers_object.up.sql (default prefix txbox_): drops the
-- check that headers are a JSON object. The rows the upgrade moved to the
-- dead-letter table stay there.
ALTER TABLE `txbox_outbox` DROP CONSTRAINT `txbox_outbox_headers_chk`;
