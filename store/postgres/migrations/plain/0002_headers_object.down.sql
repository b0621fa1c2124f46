-- Reverts 0002_headers_object.up.sql (default prefix txbox_, no schema).
ALTER TABLE "txbox_outbox" DROP CONSTRAINT IF EXISTS "txbox_outbox_headers_chk";
