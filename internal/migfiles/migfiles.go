// Package migfiles reads a dialect's embedded migrations and writes them,
// rendered, as the plain files golang-migrate, goose or atlas apply.
//
// A dialect embeds its schema changes as migrations/NNNN_name.sql (the
// up step, which the driver's Migrate runs) and their reverts as
// migrations/down/NNNN_name.sql, both with the dialect's name
// placeholders. Read pairs them and checks that the versions run from 1
// with no gap; the dialect renders the names; Write puts the result into
// a folder as NNNN_name.up.sql and NNNN_name.down.sql, the names
// golang-migrate expects (docs/operations.md, "Migrations with your own
// tool").
package migfiles

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Migration is one versioned schema change and its revert.
type Migration struct {
	// Version numbers the migrations from 1 with no gaps.
	Version int
	// Name is the file's name without the version and extension ("init").
	Name string
	// Up is the change, Down its revert.
	Up, Down string
}

// Read returns the migrations under migrations/ in fsys in version order,
// each with the revert of the same name under migrations/down/. A down
// file may restore a statement of an earlier up file verbatim with a line
//
//	-- txbox:restore NNNN_name <the statement's first line>
//
// so that the revert and the original cannot drift apart. errPrefix starts
// every error ("postgres").
func Read(fsys fs.FS, errPrefix string) ([]Migration, error) {
	ups, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(ups)
	out := make([]Migration, 0, len(ups))
	byName := map[string]string{}
	for i, f := range ups {
		base := strings.TrimSuffix(path.Base(f), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v != i+1 || len(num) != 4 {
			return nil, fmt.Errorf("%s: migration file %s is not numbered %04d_name.sql", errPrefix, f, i+1)
		}
		up, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		byName[base] = string(up)
		out = append(out, Migration{Version: v, Name: name, Up: string(up)})
	}
	for i, m := range out {
		f := fmt.Sprintf("migrations/down/%04d_%s.sql", m.Version, m.Name)
		down, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, fmt.Errorf("%s: migration %04d_%s has no revert: %w", errPrefix, m.Version, m.Name, err)
		}
		if out[i].Down, err = restore(string(down), byName); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", errPrefix, f, err)
		}
	}
	return out, nil
}

const restoreMark = "-- txbox:restore "

// restore replaces each restore line of down with the statement it names:
// from the line of the named up file that starts with the given text to
// the first line after it that ends with a semicolon outside a $$ body.
func restore(down string, ups map[string]string) (string, error) {
	lines := strings.SplitAfter(down, "\n")
	var b strings.Builder
	for _, line := range lines {
		spec, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), restoreMark)
		if !ok {
			b.WriteString(line)
			continue
		}
		file, first, _ := strings.Cut(spec, " ")
		stmt, err := statement(ups[file], first)
		if err != nil {
			return "", fmt.Errorf("restore %s: %w", spec, err)
		}
		b.WriteString(stmt)
	}
	return b.String(), nil
}

// statement returns the statement of sqlText whose first line starts with
// first, through its final newline.
func statement(sqlText, first string) (string, error) {
	lines := strings.SplitAfter(sqlText, "\n")
	for i, l := range lines {
		if first == "" || !strings.HasPrefix(l, first) {
			continue
		}
		dollars := 0
		for j := i; j < len(lines); j++ {
			dollars += strings.Count(lines[j], "$$")
			if dollars%2 == 0 && strings.HasSuffix(strings.TrimSpace(lines[j]), ";") {
				return strings.Join(lines[i:j+1], ""), nil
			}
		}
		return "", errors.New("the statement does not end")
	}
	return "", errors.New("no such statement")
}

// Write writes each of a dialect's migrations, as file turns it into a
// Migration, into dir as NNNN_name.up.sql and NNNN_name.down.sql,
// creating dir when it is missing and replacing files of those names. It
// returns the paths it wrote.
func Write[M any](dir string, ms []M, file func(M) Migration) ([]string, error) {
	if dir == "" {
		return nil, errors.New("no output folder")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, dm := range ms {
		m := file(dm)
		for _, f := range []struct{ suffix, sql string }{{".up.sql", m.Up}, {".down.sql", m.Down}} {
			p := filepath.Join(dir, fmt.Sprintf("%04d_%s%s", m.Version, m.Name, f.suffix))
			if err := os.WriteFile(p, []byte(f.sql), 0o644); err != nil {
				return paths, err
			}
			paths = append(paths, p)
		}
	}
	return paths, nil
}
