package route_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/consume/internal/route"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/store/sqlite"
)

func newInbox(t *testing.T) *inbox.Inbox {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "inbox.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	in, err := inbox.New(st, inbox.Config{Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// TestNew: exactly one of Inbox and Tenants; the error names the
// component and both fields.
func TestNew(t *testing.T) {
	in, tenants := newInbox(t), &inbox.Tenants{}
	for _, c := range []struct {
		in *inbox.Inbox
		ts *inbox.Tenants
		ok bool
	}{{nil, nil, false}, {in, tenants, false}, {in, nil, true}, {nil, tenants, true}} {
		_, err := route.New("consume/x", c.in, c.ts)
		var ce *consume.ConfigError
		if c.ok != (err == nil) || (err != nil && (!errors.As(err, &ce) || ce.Component != "consume/x" || ce.Field != "Inbox, Tenants")) {
			t.Errorf("Inbox %v, Tenants %v: %v", c.in != nil, c.ts != nil, err)
		}
	}
}

// TestInbox: Inbox for every message with Config.Inbox; the tenant's
// inbox with Config.Tenants, and an invalid message wrapping
// ErrUnknownTenant for a tenant without one.
func TestInbox(t *testing.T) {
	one, acme := newInbox(t), newInbox(t)
	tenants := &inbox.Tenants{}
	if err := tenants.Add("acme", acme); err != nil {
		t.Fatal(err)
	}
	msg := func(tenant string) inbox.Message {
		return inbox.Message{ID: txbox.NewID(), Headers: map[string]string{txbox.HeaderTenant: tenant}}
	}
	single, _ := route.New("consume/x", one, nil)
	if got, err := single.Inbox(msg("globex")); got != one || err != nil || single.Name() != "billing" {
		t.Fatalf("Inbox: %v, %v (name %s); want the one inbox", got, err, single.Name())
	}
	routed, _ := route.New("consume/x", nil, tenants)
	if got, err := routed.Inbox(msg("acme")); got != acme || err != nil {
		t.Fatalf("acme: %v, %v", got, err)
	}
	_, err := routed.Inbox(msg("globex"))
	var ime *consume.InvalidMessageError
	if !errors.As(err, &ime) || !errors.Is(err, inbox.ErrUnknownTenant) {
		t.Fatalf("globex: %v, want an InvalidMessageError wrapping ErrUnknownTenant", err)
	}
}
