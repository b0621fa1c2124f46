// Package route is the consumer adapters' choice of inbox: the one
// Config.Inbox, or the tenant's inbox of Config.Tenants, picked by the
// message's txbox-tenant header. Every adapter checks its Config and
// routes its messages through it, so they refuse the same configurations
// and the same messages.
package route

import (
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/inbox"
)

// Target is an adapter's Config.Inbox or Config.Tenants: exactly one is
// set.
type Target struct {
	inbox   *inbox.Inbox
	tenants *inbox.Tenants
}

// New checks that exactly one of in and tenants is set. The
// *consume.ConfigError names component ("consume/nats") and both fields.
func New(component string, in *inbox.Inbox, tenants *inbox.Tenants) (Target, error) {
	switch {
	case in == nil && tenants == nil:
		return Target{}, &consume.ConfigError{Component: component, Field: "Inbox, Tenants", Reason: "one is required"}
	case in != nil && tenants != nil:
		return Target{}, &consume.ConfigError{Component: component, Field: "Inbox, Tenants", Reason: "are exclusive: set Inbox for one inbox, Tenants to route by the txbox-tenant header"}
	}
	return Target{inbox: in, tenants: tenants}, nil
}

// Name names the target in the adapter's log lines (the consumer
// attribute) and RabbitMQ consumer tags: the inbox's consumer name, or
// "tenants".
func (t Target) Name() string {
	if t.inbox != nil {
		return t.inbox.Consumer()
	}
	return "tenants"
}

// Inbox returns the inbox msg goes to. A message Tenants cannot route is
// a *consume.InvalidMessageError wrapping the *inbox.UnknownTenantError,
// which every adapter already settles as a message that no redelivery can
// help (term, reject, skip, 400).
func (t Target) Inbox(msg inbox.Message) (*inbox.Inbox, error) {
	if t.inbox != nil {
		return t.inbox, nil
	}
	in, err := t.tenants.Route(msg)
	if err != nil {
		return nil, &consume.InvalidMessageError{Reason: err.Error(), Err: err}
	}
	return in, nil
}
