package mysql_test

import (
	"database/sql"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/txbox/txbox/inbox/inboxtest"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/mysql"
	"github.com/txbox/txbox/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, storeharness.MySQL())
}

// TestRedriveConformance runs the redrive suite (store.OutboxRedriver).
func TestRedriveConformance(t *testing.T) {
	t.Parallel()
	storetest.ExerciseRedrive(t, storeharness.MySQL())
}

// TestLockConformance runs the lock claim suite (store.OutboxLocker).
func TestLockConformance(t *testing.T) {
	t.Parallel()
	storetest.ExerciseLock(t, storeharness.MySQL())
}

// TestFanoutConformance runs the fan-out suite (store.Expander, route
// claims).
func TestFanoutConformance(t *testing.T) {
	t.Parallel()
	storetest.ExerciseFanout(t, storeharness.MySQL())
}

// TestConformanceOnPlainPool runs the suite again through New on a plain
// go-sql-driver pool left at the server's REPEATABLE READ default, without
// interpolateParams: the path where the driver sets READ COMMITTED per
// transaction and every statement is prepared.
func TestConformanceOnPlainPool(t *testing.T) {
	t.Parallel()
	h := storeharness.MySQL()
	h.Open = func(t *testing.T, ns, prefix string) (store.Driver, error) {
		db, err := sql.Open("mysql", testenv.MySQLDSN+"?parseTime=true")
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(10)
		d, err := mysql.New(db, mysql.Config{Schema: ns, TablePrefix: prefix})
		if err != nil {
			db.Close()
			return nil, err
		}
		t.Cleanup(func() {
			storeharness.NoDeadlocks(t, d)
			_ = db.Close()
		})
		return d, nil
	}
	storetest.Exercise(t, h)
	storetest.ExerciseRedrive(t, h)
}

func TestInboxConformance(t *testing.T) {
	t.Parallel()
	inboxtest.ExerciseStore(t, storeharness.MySQLInbox())
}

// TestInboxHelperProcess is the second process of TestInboxConformance's
// concurrent-duplicates test; it does nothing in a normal run.
func TestInboxHelperProcess(t *testing.T) {
	inboxtest.HelperProcess(t, storeharness.MySQLInbox())
}
