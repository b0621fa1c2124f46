package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/txbox/txbox/store/postgres"
)

// TestMigrateGetWritesTheFiles: `txbox migrate get` writes an up and a
// down file for every embedded migration, golang-migrate-named and
// rendered for the schema and prefix asked for.
func TestMigrateGetWritesTheFiles(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "new", "folder")
	code, out, errOut := runInProcess(t, nil, "migrate", "get", "--dialect", "postgres", "--out", dir, "--schema", "app", "--prefix", "evt_")
	if code != exitOK {
		t.Fatalf("migrate get: %d %q %q", code, out, errOut)
	}
	migs, err := postgres.Migrations("app", "evt_")
	if err != nil {
		t.Fatal(err)
	}
	names, err := os.ReadDir(dir)
	if err != nil || len(names) != 2*len(migs) {
		t.Fatalf("wrote %d files (%v), want an up and a down for each of %d migrations", len(names), err, len(migs))
	}
	for _, m := range migs {
		for suffix, want := range map[string]string{".up.sql": m.SQL, ".down.sql": m.Down} {
			name := filepath.Join(dir, fmt.Sprintf("%04d_%s%s", m.Version, m.Name, suffix))
			got, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != want || strings.Contains(want, "{{") || !strings.Contains(want, `"app"."evt_`) {
				t.Errorf("%s is not migration %d rendered for schema app, prefix evt_:\n%s", name, m.Version, got)
			}
		}
	}
	if want := fmt.Sprintf("wrote %d files for postgres schema version %d", 2*len(migs), len(migs)); !strings.Contains(out, want) {
		t.Errorf("stdout %q does not say what it wrote", out)
	}
	// Run again, the files are replaced, not refused.
	if code, _, errOut := runInProcess(t, nil, "migrate", "get", "--dialect", "postgres", "--out", dir); code != exitOK {
		t.Fatalf("migrate get into a full folder: %d %q", code, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "0001_init.up.sql")); !strings.Contains(string(b), `"txbox_outbox"`) {
		t.Error("a second run with the defaults did not replace the files")
	}
}

// TestMigrateGetErrors: a bad dialect, a missing or unwritable folder and
// a hostile prefix are clear errors.
func TestMigrateGetErrors(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--dialect", "oracle", "--out", t.TempDir()}, exitUsage, `unknown --dialect "oracle" (postgres, mysql or sqlite)`},
		{[]string{"--out", t.TempDir()}, exitUsage, "--dialect is required"},
		{[]string{"--dialect", "mysql"}, exitUsage, "--out is required"},
		{[]string{"--dialect", "sqlite", "--out", t.TempDir(), "--schema", "s"}, exitUsage, "sqlite has no schemas"},
		{[]string{"--dialect", "sqlite", "--out", filepath.Join(file, "sub")}, exitFailure, "--out " + filepath.Join(file, "sub")},
		{[]string{"--dialect", "mysql", "--out", t.TempDir(), "--prefix", "x;"}, exitFailure, "invalid identifier"},
	} {
		code, _, errOut := runInProcess(t, nil, append([]string{"migrate", "get"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("migrate get %v: exit %d, stderr %q; want exit %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
}
