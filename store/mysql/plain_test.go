package mysql

import (
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/txbox/txbox/internal/testenv"
)

// plainDir holds the published copy of the migrations (README.md there).
var plainDir = filepath.Join("migrations", "plain")

// TestPlainSQLUpDown applies the published files the way golang-migrate
// does, on a fresh database: every up in order, every down in reverse
// order, then every up again. Each up must have its down, and each pass
// must leave the schema it promises: the headers check and the status-led
// ordering index after the ups, none of it after the downs.
func TestPlainSQLUpDown(t *testing.T) {
	t.Parallel()
	_, dsn := testenv.MySQLDatabase(t, openSQL, "multiStatements=true")
	db, err := openSQL(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ups, err := filepath.Glob(filepath.Join(plainDir, "*.up.sql"))
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
		want := []string{"txbox_dead_letter", "txbox_inbox", "txbox_instance", "txbox_lease", "txbox_outbox"}
		if got := plainTables(t, db); !slices.Equal(got, want) {
			t.Fatalf("after up: tables %v, want %v", got, want)
		}
		if _, err := db.Exec("INSERT INTO txbox_outbox (event_type, payload, headers) VALUES ('t', 'p', '[1]')"); err == nil {
			t.Fatal("after up: headers [1] accepted")
		}
		if got := plainOrderIndex(t, db); got != "event_type,status,event_key,id" {
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
	if got := plainTables(t, db); len(got) != 0 {
		t.Fatalf("after every down: tables %v", got)
	}
	up()
}

// plainTables lists the tables of the current database, sorted.
func plainTables(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() ORDER BY table_name")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
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
