package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
)

// tenantInbox is one tenant's inbox on a SQLite file of its own, and the
// ids its handler ran for.
type tenantInbox struct {
	in  *inbox.Inbox
	mu  sync.Mutex
	ran []txbox.ID
}

func newTenantInbox(t *testing.T) *tenantInbox {
	t.Helper()
	in, err := inbox.New(openStore(t), inbox.Config{Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	return &tenantInbox{in: in}
}

// tenantsHandler records each message in the inbox of its tenant ("" for
// the default), so a test can tell which inbox ran it.
func tenantsHandler(by map[string]*tenantInbox) inbox.Handler {
	return func(_ context.Context, _ any, m inbox.Message) error {
		ti := by[m.Tenant()]
		ti.mu.Lock()
		defer ti.mu.Unlock()
		ti.ran = append(ti.ran, m.ID)
		return nil
	}
}

func tenantMsg(id txbox.ID, tenant string) inbox.Message {
	h := map[string]string{}
	if tenant != "" {
		h[txbox.HeaderTenant] = tenant
	}
	return inbox.Message{ID: id, Headers: h}
}

// TestTenantsRoute: each message runs in its tenant's inbox, the same id
// once per tenant; an unknown tenant, and a message without the header
// when there is no Default, are refused with ErrUnknownTenant and run
// nowhere; with Default set, a message without the header goes there.
func TestTenantsRoute(t *testing.T) {
	ctx := context.Background()
	acme, globex, def := newTenantInbox(t), newTenantInbox(t), newTenantInbox(t)
	h := tenantsHandler(map[string]*tenantInbox{"acme": acme, "globex": globex, "": def})
	var ts inbox.Tenants
	if err := ts.Add("acme", acme.in); err != nil {
		t.Fatal(err)
	}
	if err := ts.Add("globex", globex.in); err != nil {
		t.Fatal(err)
	}
	id := txbox.NewID()
	for _, tc := range []struct {
		tenant string
		want   inbox.Result
	}{{"acme", inbox.Processed}, {"globex", inbox.Processed}, {"acme", inbox.Duplicate}, {"globex", inbox.Duplicate}} {
		if r, err := ts.Handle(ctx, tenantMsg(id, tc.tenant), h); r != tc.want || err != nil {
			t.Fatalf("%s: %v, %v; want %v", tc.tenant, r, err, tc.want)
		}
	}
	for _, tenant := range []string{"initech", ""} {
		r, err := ts.Handle(ctx, tenantMsg(txbox.NewID(), tenant), h)
		var ute *inbox.UnknownTenantError
		if r != inbox.Failed || !errors.Is(err, inbox.ErrUnknownTenant) || !errors.As(err, &ute) || ute.Tenant != tenant {
			t.Fatalf("tenant %q: %v, %v; want Failed, an UnknownTenantError naming it", tenant, r, err)
		}
	}
	ts.Default = def.in
	if r, err := ts.Handle(ctx, tenantMsg(id, ""), h); r != inbox.Processed || err != nil {
		t.Fatalf("default: %v, %v", r, err)
	}
	if _, err := ts.Handle(ctx, tenantMsg(txbox.NewID(), "initech"), h); !errors.Is(err, inbox.ErrUnknownTenant) {
		t.Fatalf("an unknown tenant went to Default: %v", err)
	}
	if len(acme.ran) != 1 || len(globex.ran) != 1 || len(def.ran) != 1 {
		t.Fatalf("ran acme %v, globex %v, default %v; want one each", acme.ran, globex.ran, def.ran)
	}
}

// TestTenantsAddRemove: Add refuses a duplicate, an empty name and a nil
// inbox; a removed tenant's messages are refused; adding and removing
// while messages are routed is safe (run with -race).
func TestTenantsAddRemove(t *testing.T) {
	ctx := context.Background()
	a := newTenantInbox(t)
	var ts inbox.Tenants
	if err := ts.Add("acme", a.in); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		name string
		in   *inbox.Inbox
	}{{"acme", a.in}, {"", a.in}, {"globex", nil}} {
		if err := ts.Add(bad.name, bad.in); !errors.Is(err, txbox.ErrInvalidConfig) {
			t.Errorf("Add(%q, %v) = %v, want a ConfigError", bad.name, bad.in, err)
		}
	}
	if got := fmt.Sprint(ts.Names()); got != "[acme]" {
		t.Fatalf("Names() = %s", got)
	}
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				name := fmt.Sprintf("t%d_%d", i, j)
				_ = ts.Add(name, a.in)
				_, _ = ts.Route(tenantMsg(txbox.NewID(), name))
				ts.Remove(name)
			}
		}()
	}
	wg.Wait()
	if !ts.Remove("acme") || ts.Remove("acme") {
		t.Fatal("Remove: want true, then false")
	}
	if _, err := ts.Handle(ctx, tenantMsg(txbox.NewID(), "acme"), tenantsHandler(nil)); !errors.Is(err, inbox.ErrUnknownTenant) {
		t.Fatalf("a removed tenant: %v", err)
	}
}

// TestTenantsHandleBatch: a batch of one tenant runs in its inbox; a batch
// mixing tenants, or with an unknown one, fails whole and runs nothing.
func TestTenantsHandleBatch(t *testing.T) {
	ctx := context.Background()
	acme, globex := newTenantInbox(t), newTenantInbox(t)
	var ts inbox.Tenants
	_ = ts.Add("acme", acme.in)
	_ = ts.Add("globex", globex.in)
	calls := 0
	h := func(_ context.Context, _ any, msgs []inbox.Message) error { calls++; return nil }
	rs, err := ts.HandleBatch(ctx, []inbox.Message{tenantMsg(txbox.NewID(), "acme"), tenantMsg(txbox.NewID(), "acme")}, h)
	if err != nil || rs[0] != inbox.Processed || rs[1] != inbox.Processed || calls != 1 {
		t.Fatalf("one tenant: %v, %v, %d calls", rs, err, calls)
	}
	for _, second := range []string{"globex", "initech"} {
		rs, err := ts.HandleBatch(ctx, []inbox.Message{tenantMsg(txbox.NewID(), "acme"), tenantMsg(txbox.NewID(), second)}, h)
		if err == nil || rs[0] != inbox.Failed || rs[1] != inbox.Failed || calls != 1 {
			t.Fatalf("acme + %s: %v, %v, %d calls; want both Failed, no call", second, rs, err, calls)
		}
		if second == "initech" && !errors.Is(err, inbox.ErrUnknownTenant) {
			t.Fatalf("acme + initech: %v, want ErrUnknownTenant", err)
		}
	}
}
