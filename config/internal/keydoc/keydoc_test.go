package keydoc

import (
	"strings"
	"testing"
)

// TestRenderFindsDrift: a key the code has and no row documents, a row
// for a key the code lacks, and a missing table are errors naming them;
// a default comes from the code, not from the page.
func TestRenderFindsDrift(t *testing.T) {
	page := "a\n<!-- keys:log -->\n| stale |\n<!-- /keys -->\nb\n"
	saved := tables
	t.Cleanup(func() { tables = saved })

	tables = []table{{name: "log", prefix: "log", rows: []row{{keys: []string{"level"}, meaning: "m"}, {keys: []string{"format"}, meaning: "f"}}}}
	_, err := Render([]byte(page))
	if err == nil || !strings.Contains(err.Error(), "keys without a row") || !strings.Contains(err.Error(), "relay.recover-max-interval") {
		t.Fatalf("undocumented keys: err = %v", err)
	}

	tables = append(saved[:0:0], saved...)
	for i := range tables {
		if tables[i].name == "log" {
			tables[i].rows = append(tables[i].rows[:len(tables[i].rows):len(tables[i].rows)], row{keys: []string{"colour"}, meaning: "x"})
		}
	}
	_, err = Render([]byte(page))
	if err == nil || !strings.Contains(err.Error(), "log.colour, which the code does not have") || !strings.Contains(err.Error(), "no <!-- keys:relay --> table") {
		t.Fatalf("stale row and missing tables: err = %v", err)
	}

	tables = []table{{name: "log", prefix: "log", rows: []row{{keys: []string{"level"}, meaning: "m"}}}}
	out, _ := Render([]byte(page))
	if !strings.Contains(string(out), "| `level` | `info` | m |") || strings.Contains(string(out), "stale") {
		t.Fatalf("rendered:\n%s", out)
	}
}
