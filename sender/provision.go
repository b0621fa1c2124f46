package sender

import (
	"context"
	"errors"
)

// Provisioner is implemented by senders that can create, before the relay
// starts, what their routes need at the destination and that the broker
// does not create on its own: a NATS JetStream stream binding the routes'
// subjects, Kafka topics, RabbitMQ exchanges. Without it a message to a
// subject no stream binds, a topic that does not exist or a missing
// exchange is rejected, and after max attempts dead-lettered.
//
// Provisioning is opt-in (`provision: true` on a sender in the relay's
// configuration, docs/configuration.md): by default txbox changes nothing
// at the destination.
type Provisioner interface {
	// Provision creates or updates, at the destination, what routes need,
	// and returns an error naming what it could not create. It leaves
	// alone what exists already and what another owner created. A route
	// field holding the "{event_type}" placeholder stands for every event
	// type: a sender covers it when the destination has a wildcard for it
	// (NATS: a trailing placeholder becomes ">") and skips it otherwise.
	// Provision waits, within ctx, for a connection that is still being
	// established.
	Provision(ctx context.Context, routes []Route) error
}

// ErrNoDestination is what [Checker.CheckRoute] returns (wrapped, with
// the destination's name) for a route whose destination does not exist:
// every message routed there would be rejected.
var ErrNoDestination = errors.New("destination does not exist")

// Checker is implemented by senders that can tell, changing nothing,
// whether a route's destination exists: a JetStream stream binds the
// subject, the Kafka topic exists, the RabbitMQ exchange exists. `txbox
// config check --connect` uses it before a deploy.
type Checker interface {
	// CheckRoute returns nil when the destination of r exists, an error
	// matching ErrNoDestination when it does not, and any other error
	// when it could not tell (the broker is unreachable, access is
	// denied). r holds no "{event_type}" placeholder. It waits, within
	// ctx, for a connection that is still being established.
	CheckRoute(ctx context.Context, r Route) error
}
