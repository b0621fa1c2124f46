package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/store/sqlite"
)

// One consumer for the events of every tenant of a relay that serves
// tenants: each tenant's inbox is on that tenant's database (here a SQLite
// file each), and Tenants routes a message by its txbox-tenant header. The
// same event id is processed once per tenant; a tenant without an inbox is
// refused, never processed in another tenant's tables.
func ExampleTenants() {
	dir, _ := os.MkdirTemp("", "tenants-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	var tenants inbox.Tenants
	for _, name := range []string{"acme", "globex"} {
		st, _ := sqlite.Open(filepath.Join(dir, name+".db"), sqlite.Config{})
		defer st.Close()
		_ = st.Migrate(ctx)
		in, _ := inbox.New(st, inbox.Config{Consumer: "billing"})
		_ = tenants.Add(name, in) // at run time too, as tenants come and go
	}
	bill := func(ctx context.Context, tx any, m inbox.Message) error {
		fmt.Println("billing", m.Tenant(), "for", m.Type)
		return nil
	}
	id := txbox.NewID()
	for _, tenant := range []string{"acme", "globex", "acme", "initech"} {
		msg := inbox.Message{ID: id, Type: "order-paid", Headers: map[string]string{txbox.HeaderTenant: tenant}}
		r, err := tenants.Handle(ctx, msg, bill)
		fmt.Println(tenant, r, errors.Is(err, inbox.ErrUnknownTenant))
	}
	// Output:
	// billing acme for order-paid
	// acme processed false
	// billing globex for order-paid
	// globex processed false
	// acme duplicate false
	// initech failed true
}
