package postgres

// MessagePrefix exposes the WAL mode message prefix to the external tests,
// which compare it with what the emit check of migration 6 returns.
func MessagePrefix(d *Driver) string { return d.messagePrefix() }
