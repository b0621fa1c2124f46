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

// ProvisionChecker is implemented by provisioners that can tell,
// changing nothing, whether Provision could create what routes need:
// `txbox config check --connect` uses it for a destination that does not
// exist yet on a sender with `provision: true`, which the relay creates
// at start.
type ProvisionChecker interface {
	// CheckProvision returns what Provision would do for routes and what
	// was and was not verified, or an error naming why Provision would
	// fail (the destination overlaps another, the credentials or the
	// account's limits do not allow it). It waits, within ctx, for a
	// connection that is still being established.
	CheckProvision(ctx context.Context, routes []Route) (ProvisionPlan, error)
}

// ProvisionPlan is what [ProvisionChecker.CheckProvision] found.
type ProvisionPlan struct {
	// Actions are what Provision would create or change, one sentence
	// each.
	Actions []string
	// Verified are the checks that passed.
	Verified []string
	// Unverified are what could not be checked before Provision tries.
	Unverified []string
	// Covers reports whether, once Provision ran, the destination of r
	// exists (r holds no placeholder): a route the provisioned routes do
	// not include stays missing. Nil when CheckProvision failed.
	Covers func(r Route) bool
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

// ConnectionChecker is implemented by senders that hold a connection of
// their own, shared by all their routes (every broker sender): `txbox
// config check --connect` dials and authenticates each one, whatever its
// routes, so a wrong port or a wrong password is found even when no route
// can be checked (a route template, the default exchange). The webhook
// sender has no such connection: its CheckRoute dials each URL.
type ConnectionChecker interface {
	// CheckConnection returns nil once the sender has connected to its
	// broker and been accepted (authenticated, authorised to open a
	// channel or list metadata), and the error that stopped it
	// otherwise, or ctx's error with the last dial error when ctx ends
	// first. It changes nothing at the destination.
	CheckConnection(ctx context.Context) error
}
