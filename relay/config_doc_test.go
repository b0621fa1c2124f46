package relay

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"strings"
	"testing"
)

// TestEveryConfigFieldSaysItsDefault: every exported field of Config and
// of the settings types it holds says its default in its doc ("Defaults
// to …"), or that it is required, so the doc is the one place a reader
// looks (the default's constant is named there too where there is one).
func TestEveryConfigFieldSaysItsDefault(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	notTest := func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }
	pkgs, err := parser.ParseDir(fset, ".", notTest, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]bool{"Config": false, "EventSettings": false, "PollingSettings": false,
		"BackoffSettings": false, "CleanupConfig": false, "CircuitConfig": false, "StreamConfig": false}
	for _, f := range pkgs["relay"].Files {
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if _, want := types[nameOf(ts)]; !ok || !want {
				return true
			}
			types[ts.Name.Name] = true
			for _, fl := range ts.Type.(*ast.StructType).Fields.List {
				if len(fl.Names) == 0 || !fl.Names[0].IsExported() {
					continue
				}
				doc := strings.Join(strings.Fields(fl.Doc.Text()), " ")
				if !strings.Contains(doc, "Defaults to") && !strings.Contains(doc, "Required") {
					t.Errorf("%s.%s: its doc does not say \"Defaults to …\"", ts.Name.Name, fl.Names[0].Name)
				}
			}
			return true
		})
	}
	for name, found := range types {
		if !found {
			t.Errorf("type %s not found", name)
		}
	}
}

func nameOf(ts *ast.TypeSpec) string {
	if ts == nil {
		return ""
	}
	return ts.Name.Name
}
