package migfiles

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

func TestReadPairsAndRestores(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"migrations/0001_init.sql":      {Data: []byte("CREATE TABLE t (a int);\nCREATE FUNCTION f() AS $$\nSELECT 1;\n$$;\n")},
		"migrations/0002_more.sql":      {Data: []byte("CREATE OR REPLACE FUNCTION f() AS $$ SELECT 2; $$;\n")},
		"migrations/down/0001_init.sql": {Data: []byte("DROP TABLE t;\n")},
		"migrations/down/0002_more.sql": {Data: []byte("-- back to version 1\n-- txbox:restore 0001_init CREATE FUNCTION f()\n")},
	}
	ms, err := Read(fsys, "test")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[1].Version != 2 || ms[1].Name != "more" || ms[0].Down != "DROP TABLE t;\n" {
		t.Fatalf("read %+v", ms)
	}
	if want := "-- back to version 1\nCREATE FUNCTION f() AS $$\nSELECT 1;\n$$;\n"; ms[1].Down != want {
		t.Fatalf("restored down is %q, want %q", ms[1].Down, want)
	}

	dir := filepath.Join(t.TempDir(), "out")
	paths, err := Write(dir, ms, func(m Migration) Migration { return m })
	if err != nil || len(paths) != 4 {
		t.Fatalf("wrote %v, %v", paths, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "0002_more.up.sql")); err != nil || string(b) != ms[1].Up {
		t.Fatalf("0002_more.up.sql: %q, %v", b, err)
	}
}

func TestReadRefusesBrokenSets(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		fsys fstest.MapFS
		want string
	}{
		"gap": {fstest.MapFS{
			"migrations/0002_x.sql": {Data: []byte("x;\n")}, "migrations/down/0002_x.sql": {Data: []byte("y;\n")},
		}, "not numbered 0001_name.sql"},
		"no down": {fstest.MapFS{"migrations/0001_x.sql": {Data: []byte("x;\n")}}, "0001_x has no revert"},
		"no such statement": {fstest.MapFS{
			"migrations/0001_x.sql": {Data: []byte("x;\n")}, "migrations/down/0001_x.sql": {Data: []byte("-- txbox:restore 0001_x y\n")},
		}, "no such statement"},
		"unended statement": {fstest.MapFS{
			"migrations/0001_x.sql": {Data: []byte("x AS $$;\n")}, "migrations/down/0001_x.sql": {Data: []byte("-- txbox:restore 0001_x x\n")},
		}, "does not end"},
	} {
		if _, err := Read(c.fsys, "test"); err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "test: ") {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
}
