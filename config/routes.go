package config

import (
	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
)

// RouteView is one route of a fanned-out event type (docs/concepts.md,
// "Fan-out") with its effective settings, as every display of a type shows
// it: txbox config check, txbox status, the admin API.
type RouteView struct {
	// Name is the route's name (relay.RouteSettings.RouteName): the one
	// in the outbox rows, the dead letters, the metrics and the logs.
	Name string `json:"name"`
	// Sender names the route's sender.
	Sender string `json:"sender"`
	// Destination names where the route's messages go, as
	// sender.DestinationOf names it ("topic=orders"), the route expanded
	// for the type and a webhook URL redacted.
	Destination string `json:"destination"`
	// Route is the route's destination fields, expanded for the type and
	// with a webhook sender's url filled in; not redacted.
	Route sender.Route `json:"-"`
	// Claim, BatchSize, MaxAttempts and Ordering are the route's
	// effective settings: its own, over the type's, over defaults.
	Claim       txbox.ClaimMode `json:"claim"`
	BatchSize   int             `json:"batch_size"`
	MaxAttempts int             `json:"max_attempts"`
	Ordering    txbox.Ordering  `json:"ordering"`
	// InFlight is the route's bound on batches between claim and finish.
	InFlight int `json:"in_flight"`
}

// Routes returns the routes of eventType in their configured order, each
// with its effective settings, resolved as the relay resolves them: a
// route's own keys over the type's, over defaults, its destination its
// own keys alone (nothing inherited from the defaults route). A type
// without fan-out (not listed, no routes key, or a routes list of one
// entry, which is the type's single route: see Effective) has none: nil.
func (c *Config) Routes(eventType string) []RouteView {
	own := c.Events[eventType]
	if own == nil || len(own.Routes) < 2 {
		return nil
	}
	typ := c.effective(own)
	typSender := *typ.Sender
	if typSender == "" && len(c.Senders) == 1 {
		for n := range c.Senders {
			typSender = n
		}
	}
	out := make([]RouteView, 0, len(own.Routes))
	for i := range own.Routes {
		r := &own.Routes[i]
		eff := c.routeEffective(own, r)
		sn := *eff.Sender
		if sn == "" {
			sn = typSender
		}
		v := RouteView{
			Name: r.RouteName(typSender), Sender: sn, Route: eff.Route.Expand(eventType),
			Claim: *eff.Claim, BatchSize: *eff.BatchSize, MaxAttempts: *eff.MaxAttempts,
			Ordering: *eff.Ordering, InFlight: *eff.InFlight,
		}
		if sc := c.Senders[sn]; sc != nil && sc.Webhook != nil && v.Route.URL == "" {
			v.Route.URL = sc.Webhook.URL
		}
		shown := v.Route
		shown.URL = RedactDSN(shown.URL)
		v.Destination = sender.DestinationOf(nil, shown)
		out = append(out, v)
	}
	return out
}

// routeEffective is route r of the type own as complete settings: r's keys
// over own's over Defaults, as Effective makes them; the route's
// destination is r's own keys, and an unset claim is chosen for r's
// sender, as the relay chooses it for each route.
func (c *Config) routeEffective(own *relay.EventSettings, r *relay.RouteSettings) relay.EventSettings {
	typ := deref(own)
	typ.Route, typ.Routes = nil, nil
	route := r.Route
	mine := relay.EventSettings{
		Sender: r.Sender, BatchSize: r.BatchSize, MaxAttempts: r.MaxAttempts,
		Backoff: r.Backoff, Ordering: r.Ordering, InFlight: r.InFlight,
	}
	merged := mine.Inherit(typ)
	eff := c.effective(&merged)
	eff.Route = &route
	return eff
}
