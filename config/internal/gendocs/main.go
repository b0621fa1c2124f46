// Command gendocs regenerates the key tables of docs/configuration.md
// from the code (package keydoc). Run it from the repository's root after
// changing a configuration key or a default:
//
//	go run ./config/internal/gendocs
package main

import (
	"fmt"
	"os"

	"github.com/txbox/txbox/config/internal/keydoc"
)

// page is the generated page, relative to the repository's root.
const page = "docs/configuration.md"

func main() {
	in, err := os.ReadFile(page)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gendocs: %v (run it from the repository's root)\n", err)
		os.Exit(1)
	}
	out, err := keydoc.Render(in)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gendocs: %v\n", err)
		os.Exit(1)
	}
	if err := os.WriteFile(page, out, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "gendocs: %v\n", err)
		os.Exit(1)
	}
}
