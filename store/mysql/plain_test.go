package mysql_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/store/mysql"
)

// TestPlainSQLUpDown applies the files `txbox migrate get` writes the way
// golang-migrate does, on a fresh database: every up in order, every down in reverse
// order, then every up again. Each up must have its down, and each pass
// must leave the schema it promises: the headers check and the status-led
// ordering index after the ups, none of it after the downs.
func TestPlainSQLUpDown(t *testing.T) {
	t.Parallel()
	name, dsn := storeharness.MySQLDatabase(t)
	db, err := sql.Open("mysql", dsn+"&multiStatements=true")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	dir := t.TempDir()
	if _, err := mysql.WriteMigrations(dir, mysql.Config{}); err != nil {
		t.Fatal(err)
	}
	ups, err := filepath.Glob(filepath.Join(dir, "*.up.sql"))
	if err != nil || len(ups) < 4 {
		t.Fatalf("up files: %v, %v", ups, err)
	}
	slices.Sort(ups)
	apply := func(path string) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (every up file needs its down file)", err)
		}
		if _, err := db.Exec(string(b)); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	up := func() {
		t.Helper()
		for _, f := range ups {
			apply(f)
		}
		want := []string{"txbox_audit", "txbox_dead_letter", "txbox_inbox", "txbox_instance", "txbox_lease", "txbox_outbox"}
		if got := storeharness.MySQL().Tables(t, name); !slices.Equal(got, want) {
			t.Fatalf("after up: tables %v, want %v", got, want)
		}
		if _, err := db.Exec("INSERT INTO txbox_outbox (event_type, payload, headers) VALUES ('t', 'p', '[1]')"); err == nil {
			t.Fatal("after up: headers [1] accepted")
		}
		if got := plainOrderIndex(t, db); got != "event_type,route,status,event_key,id" {
			t.Fatalf("after up: txbox_order on %s", got)
		}
	}
	down := func(from, to int) {
		t.Helper()
		for i := from; i >= to; i-- {
			apply(strings.TrimSuffix(ups[i], ".up.sql") + ".down.sql")
		}
	}

	up()
	down(len(ups)-1, 1)
	if got := plainOrderIndex(t, db); got != "event_type,event_key,status,id" {
		t.Errorf("after the downs to version 1: txbox_order on %s", got)
	}
	if _, err := db.Exec("INSERT INTO txbox_outbox (event_type, payload, headers) VALUES ('t', 'p', '[1]')"); err != nil {
		t.Errorf("after the downs to version 1: headers [1] refused: %v", err)
	}
	down(0, 0)
	if got := storeharness.MySQL().Tables(t, name); len(got) != 0 {
		t.Fatalf("after every down: tables %v", got)
	}
	up()
}

// plainOrderIndex returns the columns of txbox_outbox's txbox_order index,
// in index order, joined by commas.
func plainOrderIndex(t *testing.T, db *sql.DB) string {
	t.Helper()
	var cols string
	err := db.QueryRow(`SELECT GROUP_CONCAT(column_name ORDER BY seq_in_index SEPARATOR ',') FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND table_name = 'txbox_outbox' AND index_name = 'txbox_order'`).Scan(&cols)
	if err != nil {
		t.Fatal(err)
	}
	return cols
}
