package storeharness

import (
	"database/sql"
	"sync"
	"testing"
)

// sharedDB is a database/sql handle of 4 connections that every test of
// the process shares, opened by the first that asks.
type sharedDB struct {
	once sync.Once
	db   *sql.DB
	err  error
}

// open returns the handle on dsn with driver, opening and pinging it on
// the first call; it fails t when that failed.
func (s *sharedDB) open(t testing.TB, driver, dsn string) *sql.DB {
	t.Helper()
	s.once.Do(func() {
		s.db, s.err = sql.Open(driver, dsn)
		if s.err == nil {
			s.db.SetMaxOpenConns(4)
			s.err = s.db.Ping()
		}
	})
	if s.err != nil {
		t.Fatalf("open %s: %v", driver, s.err)
	}
	return s.db
}

// CloseShared closes the admin handles that [PostgresAdmin] and
// [MySQLAdmin] share for the whole test process. A package's TestMain
// calls it once the tests have run (testenv.RunThen), so that goleak,
// looking next for goroutines that outlived the tests, does not report
// these handles' database/sql goroutines and still reports a real leak.
func CloseShared() {
	for _, db := range []*sql.DB{pgAdmin.db, myAdmin.db} {
		if db != nil {
			_ = db.Close()
		}
	}
}
