package txbox_test

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path"
	"strings"
	"testing"
)

// maxTrackedFileSize is the largest file the tree may hold unless
// testdata/tree-allow.txt declares it.
const maxTrackedFileSize = 1 << 20

// trackedFiles returns the slash-separated paths git tracks, from the
// module root, leaving out those deleted from the working tree. The tree
// tests need git: without it they fail, they do not pass unchecked.
func trackedFiles(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files (the tree tests read the tracked files): %v", err)
	}
	var files []string
	for _, f := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if _, err := os.Lstat(f); err == nil {
			files = append(files, f)
		}
	}
	if len(files) < 100 {
		t.Fatalf("git ls-files listed %d files: not the txbox tree", len(files))
	}
	return files
}

// allowedFiles reads the patterns of testdata/tree-allow.txt.
func allowedFiles(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("testdata/tree-allow.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var patterns []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pattern, why, _ := strings.Cut(line, " ")
		if _, err := path.Match(pattern, ""); err != nil || strings.TrimSpace(why) == "" {
			t.Fatalf("testdata/tree-allow.txt: %q: want a valid pattern and why", line)
		}
		patterns = append(patterns, pattern)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return patterns
}

// executableMagic are the first bytes of ELF, Mach-O (32/64-bit, both byte
// orders, universal) and PE/COFF files.
var executableMagic = [][]byte{
	[]byte("\x7fELF"),
	{0xfe, 0xed, 0xfa, 0xce}, {0xce, 0xfa, 0xed, 0xfe},
	{0xfe, 0xed, 0xfa, 0xcf}, {0xcf, 0xfa, 0xed, 0xfe},
	{0xca, 0xfe, 0xba, 0xbe},
	[]byte("MZ"),
}

// strayReason says why file, whose first bytes are head, does not belong
// in the tree, or returns "" when it does.
func strayReason(file string, size int64, head []byte, allowed bool) string {
	for _, m := range executableMagic {
		if bytes.HasPrefix(head, m) {
			return "an executable"
		}
	}
	switch {
	case strings.HasSuffix(file, ".log"):
		return "a log file"
	case allowed:
		return ""
	case bytes.IndexByte(head, 0) >= 0:
		return "binary (NUL bytes)"
	case size > maxTrackedFileSize:
		return "over 1 MB"
	}
	return ""
}

// TestTreeHoldsNoStrayFiles fails when git tracks an executable, a log
// file, or a binary file or one over 1 MB that testdata/tree-allow.txt
// does not declare: build outputs and run artefacts belong in .gitignore.
func TestTreeHoldsNoStrayFiles(t *testing.T) {
	t.Parallel()
	patterns := allowedFiles(t)
	for _, file := range trackedFiles(t) {
		allowed := false
		for _, p := range patterns {
			if ok, _ := path.Match(p, file); ok {
				allowed = true
			}
		}
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 8000) // as much as git reads to call a file binary
		n, err := io.ReadFull(f, head)
		_ = f.Close()
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			t.Fatal(err)
		}
		if why := strayReason(file, st.Size(), head[:n], allowed); why != "" {
			t.Errorf("%s is %s (%d bytes): delete it and cover it in .gitignore, or declare it in testdata/tree-allow.txt", file, why, st.Size())
		}
	}
}

func TestStrayReason(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file    string
		size    int64
		head    string
		allowed bool
		want    string
	}{
		{"main.go", 10, "package main", false, ""},
		{"bench/watermill/watermill", 16 << 20, "\x7fELF\x02\x01", false, "an executable"},
		{"tool.exe", 100, "MZ\x90\x00", true, "an executable"},
		{"relay.log", 20, "bash: ./txbox: No such file", true, "a log file"},
		{"data.bin", 10, "a\x00b", false, "binary (NUL bytes)"},
		{"docs/images/x.png", 10, "\x89PNG\x00", true, ""},
		{"big.json", 2 << 20, "{}", false, "over 1 MB"},
		{"big.json", 2 << 20, "{}", true, ""},
	} {
		if got := strayReason(tc.file, tc.size, []byte(tc.head), tc.allowed); got != tc.want {
			t.Errorf("strayReason(%s, %d, allowed %v) = %q, want %q", tc.file, tc.size, tc.allowed, got, tc.want)
		}
	}
}

// maxFunctionLines is the longest a non-test function may be, from its
// func line to its closing brace.
const maxFunctionLines = 80

// TestNoLongFunctions keeps every non-test function within
// maxFunctionLines, so that each reads on a screen or two.
func TestNoLongFunctions(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	for _, file := range trackedFiles(t) {
		if !strings.HasSuffix(file, ".go") || strings.HasSuffix(file, "_test.go") || strings.Contains("/"+file, "/testdata/") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			if lines > maxFunctionLines {
				t.Errorf("%s: %s is %d lines long (at most %d): split it", fset.Position(fn.Pos()), fn.Name.Name, lines, maxFunctionLines)
			}
		}
	}
}
