-- txbox MySQL/MariaDB schema, version 3: the ordering index leads with the
-- status, (event_type, status, event_key, id), so the ordered claim can
-- walk the keys that have PENDING rows with a loose index scan and never
-- visits the PROCESSED history kept for retention. Every lookup of the old
-- column order (event_type, event_key, status, id) was an equality on the
-- type, the key and the status, which the new order serves as well.
--
-- One ALTER: InnoDB drops and rebuilds the index in place, and running it
-- again after it succeeded (were the version not recorded) does the same.
-- Version 2 is another change; versions only need to increase.

ALTER TABLE `txbox_outbox` DROP INDEX txbox_order, ADD INDEX txbox_order (event_type, status, event_key, id);
