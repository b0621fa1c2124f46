package storeharness

import "database/sql"

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
