package txbox_test

import (
	"go/parser"
	"go/token"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/txbox/txbox"

// packageLayers are the layers of the module's packages, lowest first: a
// package imports from its own layer or a lower one. A package belongs to
// the layer of the longest prefix of its path listed here ("" is the root
// package, core types).
//
//  0. leaves: the root package (core types: Event, IDs, errors and the
//     relay's vocabulary: ordering, claim modes, hook events, health
//     reports; docs/architecture.md, "Where the public types live") and
//     internal/*
//  1. the seams and their implementations: store/*, sender/*, and the
//     internal support built on them (internal/timing, the benchmarks'
//     sender probe)
//  2. the writers and readers of the tables: outbox, inbox/* (with
//     inbox/inboxtest, the inbox suite every dialect runs), and
//     internal/storeharness, the dialects' test set-up, which fills in
//     inboxtest's harness (and store/storeharness, its deprecated alias)
//  3. delivery: relay/*, consume/*, tenants (which runs one delivery
//     unit per tenant), and internal/consumetest, the consumers' test
//     support, which runs the outbox and the relay too
//  4. what watches a relay: health, admin
//  5. the daemon's configuration: config
//  6. programs: cmd/*, examples/*, bench/*, e2e
var packageLayers = map[string]int{
	"":                      0,
	"internal":              0,
	"store":                 1,
	"sender":                1,
	"internal/timing":       1,
	"outbox":                2,
	"inbox":                 2,
	"internal/storeharness": 2,
	"store/storeharness":    2,
	"relay":                 3,
	"consume":               3,
	"tenants":               3,
	"internal/consumetest":  3,
	"health":                4,
	"admin":                 4,
	"config":                5,
	"cmd":                   6,
	"examples":              6,
	"bench":                 6,
	"e2e":                   6,
}

// upwardImportsAllowed are the imports that go up a layer on purpose, as
// "importer imported": an entry would be a package that needs, for a
// reason its comment gives, something built on it. There is none: code
// that would need one moves up to the layer of what it imports (as the
// inbox suite moved from store/storetest to inbox/inboxtest).
var upwardImportsAllowed = map[string]bool{}

// layerOf returns the layer of the package at pkg (a path in the module).
func layerOf(pkg string) (int, bool) {
	for p := pkg; ; p = path.Dir(p) {
		if p == "." {
			p = ""
		}
		if l, ok := packageLayers[p]; ok && (p != "" || pkg == "") {
			return l, true
		}
		if p == "" {
			return 0, false
		}
	}
}

// TestImportsGoDownTheLayers fails when a non-test file imports a package
// of a higher layer than its own (packageLayers), so that a leaf stays a
// leaf and the core never depends on what is built on it.
func TestImportsGoDownTheLayers(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	seen := map[string]bool{}
	for _, file := range trackedFiles(t) {
		if !strings.HasSuffix(file, ".go") || strings.HasSuffix(file, "_test.go") || strings.Contains("/"+file, "/testdata/") {
			continue
		}
		pkg := path.Dir(file)
		if pkg == "." {
			pkg = ""
		}
		from, ok := layerOf(pkg)
		if !ok {
			t.Errorf("%s: package %q has no layer in packageLayers", file, pkg)
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p != modulePath && !strings.HasPrefix(p, modulePath+"/") {
				continue
			}
			to := strings.TrimPrefix(strings.TrimPrefix(p, modulePath), "/")
			top, ok := layerOf(to)
			if !ok || top <= from || seen[pkg+" "+to] {
				continue
			}
			seen[pkg+" "+to] = true
			if !upwardImportsAllowed[pkg+" "+to] {
				t.Errorf("%s (layer %d) imports %s (layer %d): move the code down, or the package up", file, from, p, top)
			}
		}
	}
	var stale []string
	for edge := range upwardImportsAllowed {
		if !seen[edge] {
			stale = append(stale, edge)
		}
	}
	slices.Sort(stale)
	for _, edge := range stale {
		t.Errorf("upwardImportsAllowed lists %q, which no longer happens: delete it", edge)
	}
}

// testSupport are the packages that exist for the tests: the services'
// helpers, the harnesses and conformance suites, the PostgreSQL servers
// of the failover tests and the version matrix (internal/pgcluster, which
// starts server processes) and its runner. A non-test file imports one
// only from another of them, so that no product package, and no binary
// built from one, carries test scaffolding.
var testSupport = map[string]bool{
	"internal/testenv":           true,
	"internal/pgcluster":         true,
	"internal/pgcluster/pgserve": true,
	"internal/amqptest":          true,
	"internal/natstest":          true,
	"internal/storeharness":      true,
	"store/storeharness":         true, // deprecated alias of internal/storeharness
	"store/storetest":            true,
	"sender/sendertest":          true,
	"internal/consumetest":       true,
	"inbox/inboxtest":            true,
}

// TestTestSupportStaysInTheTests fails when a product package's non-test
// file imports a package of testSupport.
func TestTestSupportStaysInTheTests(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	packages := map[string]bool{}
	for _, file := range trackedFiles(t) {
		if !strings.HasSuffix(file, ".go") || strings.Contains("/"+file, "/testdata/") {
			continue
		}
		pkg := path.Dir(file)
		packages[pkg] = true
		if strings.HasSuffix(file, "_test.go") || testSupport[pkg] {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if to := strings.TrimPrefix(p, modulePath+"/"); to != p && testSupport[to] {
				t.Errorf("%s imports %s, which is test support: only tests and other test support may", file, p)
			}
		}
	}
	for pkg := range testSupport {
		if !packages[pkg] {
			t.Errorf("testSupport lists %s, which is no package: delete it", pkg)
		}
	}
}
