// Package storeharness is the shared test set-up of the three store
// dialects: a fresh namespace on the real database (a PostgreSQL schema, a
// MariaDB database, a SQLite file) dropped when the test ends, a pool or
// driver on it, migration, and the harnesses the conformance suites take:
// store/storetest's ([Postgres], [MySQL], [SQLite]) and inbox/inboxtest's
// ([PostgresInbox], [MySQLInbox], [SQLiteInbox]). Filling in the latter
// puts it in the inbox's layer, above the store (see layers_test.go).
//
// It is internal because it is txbox's own test set-up, not an API: it
// reaches the services internal/testenv names (the TXBOX_TEST_* addresses)
// and fails a test when one is missing. The conformance suites themselves,
// store/storetest and inbox/inboxtest, are public: a dialect outside this
// module runs them with a storetest.Harness and an inboxtest.Harness of
// its own.
//
// It imports the dialect packages, so only external test packages
// (package postgres_test, inboxtest_test, ...) may use it; a dialect's
// in-package tests keep their own set-up, built on internal/testenv, which
// imports no driver. Like testenv, a missing service fails the test; it
// never skips.
package storeharness
