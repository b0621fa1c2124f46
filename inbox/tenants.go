package inbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/txbox/txbox"
)

// ErrUnknownTenant is matched (errors.Is) by the *UnknownTenantError of
// a message that Tenants cannot route: it names a tenant no inbox was
// added for, or has no txbox-tenant header and Tenants has no Default.
var ErrUnknownTenant = errors.New("inbox: unknown tenant")

// UnknownTenantError is returned by Tenants for a message it cannot
// route. Processing such a message in another tenant's inbox would write
// one tenant's effects into another's tables, so the message is refused;
// the consumer adapters treat it as an invalid message (see
// docs/multi-tenant.md, "Consumers").
type UnknownTenantError struct {
	// Tenant is the txbox-tenant header's value; "" when the message
	// has none.
	Tenant string
}

func (e *UnknownTenantError) Error() string {
	if e.Tenant == "" {
		return "inbox: no " + txbox.HeaderTenant + " header and no default inbox"
	}
	return fmt.Sprintf("inbox: unknown tenant %q (no inbox for it)", e.Tenant)
}

// Unwrap returns ErrUnknownTenant.
func (e *UnknownTenantError) Unwrap() error { return ErrUnknownTenant }

// Tenant returns the tenant a message belongs to: its txbox-tenant header
// (txbox.HeaderTenant), set by a relay that serves tenants; "" when the
// message has none.
func (m Message) Tenant() string { return m.Headers[txbox.HeaderTenant] }

// Tenants routes each message to the inbox of its tenant, named by the
// message's txbox-tenant header: one *Inbox per tenant, each on that
// tenant's inbox table (its own database or schema), so the same event id
// is deduplicated per tenant. The consumer adapters in consume/ take it in
// their Config.Tenants in place of Config.Inbox.
//
// Tenants are added and removed at run time (a relay adds tenants as
// tenants-query finds them): Add, Remove and the routing methods are safe
// for concurrent use. The zero value routes nothing; it is ready for Add.
type Tenants struct {
	// Default, when set, receives the messages without a txbox-tenant
	// header (those of a relay that serves no tenants). Nil refuses them
	// with an *UnknownTenantError. A message naming a tenant that has no
	// inbox is refused whatever Default is: it is never processed in the
	// wrong tenant's tables. Set it before the first message; it is not
	// guarded for changes while messages are routed.
	Default *Inbox

	mu      sync.RWMutex
	inboxes map[string]*Inbox
}

// Add adds the inbox of tenant name. It returns a *ConfigError for an
// empty name, a nil inbox or a name added before (Remove it first).
func (t *Tenants) Add(name string, in *Inbox) error {
	if name == "" || in == nil {
		return &ConfigError{Component: "inbox", Field: "Tenants", Reason: fmt.Sprintf("Add(%q): a tenant needs a name and an inbox", name)}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.inboxes[name]; ok {
		return &ConfigError{Component: "inbox", Field: "Tenants", Reason: fmt.Sprintf("tenant %q was added before", name)}
	}
	if t.inboxes == nil {
		t.inboxes = map[string]*Inbox{}
	}
	t.inboxes[name] = in
	return nil
}

// Remove removes the inbox of tenant name and reports whether it was
// there. Messages of that tenant are refused from then on; a message
// already routed to it finishes in it.
func (t *Tenants) Remove(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.inboxes[name]
	delete(t.inboxes, name)
	return ok
}

// Inbox returns the inbox of tenant name, if it was added.
func (t *Tenants) Inbox(name string) (*Inbox, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	in, ok := t.inboxes[name]
	return in, ok
}

// Names returns the tenants added, sorted.
func (t *Tenants) Names() []string {
	t.mu.RLock()
	names := make([]string, 0, len(t.inboxes))
	for n := range t.inboxes {
		names = append(names, n)
	}
	t.mu.RUnlock()
	slices.Sort(names)
	return names
}

// Route returns the inbox of msg's tenant: the inbox added for its
// txbox-tenant header, or Default when it has none. It returns an
// *UnknownTenantError (errors.Is ErrUnknownTenant) when there is no such
// inbox.
func (t *Tenants) Route(msg Message) (*Inbox, error) {
	name, ok := msg.Headers[txbox.HeaderTenant]
	if !ok || name == "" {
		if t.Default == nil {
			return nil, &UnknownTenantError{}
		}
		return t.Default, nil
	}
	in, ok := t.Inbox(name)
	if !ok {
		return nil, &UnknownTenantError{Tenant: name}
	}
	return in, nil
}

// Handle routes msg (Route) and runs Inbox.Handle in its tenant's inbox.
// A message that cannot be routed is Failed with an *UnknownTenantError,
// and h does not run.
func (t *Tenants) Handle(ctx context.Context, msg Message, h Handler) (Result, error) {
	in, err := t.Route(msg)
	if err != nil {
		return Failed, err
	}
	return in.Handle(ctx, msg, h)
}

// HandleBatch runs Inbox.HandleBatch in the inbox of the batch's tenant.
// Every message of a batch must route to the same inbox (one transaction
// cannot span two tenants' databases): a batch mixing tenants, or holding
// a message that cannot be routed, is Failed as a whole with an error and
// h does not run; an unroutable message makes it an *UnknownTenantError.
func (t *Tenants) HandleBatch(ctx context.Context, msgs []Message, h BatchHandler) ([]Result, error) {
	results := make([]Result, len(msgs))
	var in *Inbox
	for i, m := range msgs {
		mi, err := t.Route(m)
		if err == nil && in != nil && mi != in {
			err = fmt.Errorf("inbox: a batch mixes tenants (message %d is of tenant %q)", i, m.Tenant())
		}
		if err != nil {
			fill(results, Failed)
			return results, fmt.Errorf("message %d: %w", i, err)
		}
		in = mi
	}
	if in == nil {
		return results, nil
	}
	return in.HandleBatch(ctx, msgs, h)
}
