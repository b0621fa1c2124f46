package config_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/txbox/txbox/config/internal/keydoc"
)

// TestConfigurationDocGenerated: the key tables of docs/configuration.md
// are those the code gives (every key, its default as the relay uses it),
// so the page cannot drift from the code.
func TestConfigurationDocGenerated(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	out, err := keydoc.Render(page)
	if err != nil {
		t.Fatalf("%v\nfix config/internal/keydoc/tables.go, then run %s", err, keydoc.Command)
	}
	if !bytes.Equal(out, page) {
		t.Fatalf("docs/configuration.md differs from the code's keys and defaults: run %s and commit the page", keydoc.Command)
	}
}
