package relay

import "time"

// SetTableKeysReload sets how often a WAL-mode relay reads the keys with
// rows in the table again (defaultTableKeysReload), for the tests of
// package relay_test that provoke a reload.
func SetTableKeysReload(c *StreamConfig, d time.Duration) { c.tableKeysReload = d }
