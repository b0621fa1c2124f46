package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

func testMigrateConcurrent(t *testing.T, e *env) {
	ns := e.h.NewNamespace(t)
	const n = 4
	drivers := make([]store.Driver, n)
	for i := range drivers {
		d, err := e.h.Open(t, ns, "")
		if err != nil {
			t.Fatal(err)
		}
		drivers[i] = d
	}
	together(t, n, func(i int) error {
		if err := drivers[i].Migrate(e.ctx); err != nil {
			return fmt.Errorf("concurrent migrate %d: %w", i, err)
		}
		return nil
	})
	if sv, ok := drivers[0].(store.SchemaVersioner); ok {
		v, err := sv.SchemaVersion(e.ctx)
		if err != nil || v == 0 || v != sv.LatestSchemaVersion() {
			t.Fatalf("schema version after migrate = %d, %v; want the latest, %d", v, err, sv.LatestSchemaVersion())
		}
	}
	tables := e.h.Tables(t, ns)
	if err := drivers[0].Migrate(e.ctx); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	if again := e.h.Tables(t, ns); !slices.Equal(tables, again) {
		t.Fatalf("second migrate changed tables: %v -> %v", tables, again)
	}
	for _, want := range []string{"txbox_outbox", "txbox_dead_letter", "txbox_inbox", "txbox_lease", "txbox_schema_version"} {
		if !slices.Contains(tables, want) {
			t.Fatalf("table %s missing after migrate: %v", want, tables)
		}
	}
	// Two prefixes in one namespace are independent.
	other, err := e.h.Open(t, ns, "second_")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Migrate(e.ctx); err != nil {
		t.Fatal(err)
	}
	e2 := &env{t: t, h: e.h, ns: ns, d: drivers[1], ctx: e.ctx}
	e2.publish(event("migrated"))
	o := &env{t: t, h: e.h, ns: ns, d: other, ctx: e.ctx}
	if rows := o.claim("migrated", 10, longLease); len(rows) != 0 {
		t.Fatal("a driver with another prefix sees the default prefix's rows")
	}
	if rows := e2.claim("migrated", 10, longLease); len(rows) != 1 {
		t.Fatalf("claimed %d after concurrent migrate, want 1", len(rows))
	}
}

func testHostileIdentifiers(t *testing.T, e *env) {
	before := e.h.Tables(t, e.ns)
	if len(before) == 0 {
		t.Fatal("no tables in the migrated namespace")
	}
	for _, name := range hostile {
		d, err := e.h.Open(t, e.ns, name)
		if err == nil {
			_ = d.Migrate(e.ctx)
			t.Errorf("prefix %q accepted", name)
			continue
		}
		if !errors.Is(err, txbox.ErrInvalidIdentifier) {
			t.Errorf("prefix %q: error %v does not match txbox.ErrInvalidIdentifier", name, err)
		}
	}
	if after := e.h.Tables(t, e.ns); !slices.Equal(before, after) {
		t.Fatalf("tables changed: %v -> %v", before, after)
	}
	e.publish(event("still-works"))
	if rows := e.claim("still-works", 1, longLease); len(rows) != 1 {
		t.Fatal("the namespace stopped working")
	}
}
