// Package admin is txbox's operations HTTP API and dashboard: an
// http.Handler to mount in a service, or to run on its own listener, as
// `txbox relay` does when admin.enabled is set (docs/operations.md).
//
// It shows, per event type, the backlog (due, scheduled, in process,
// failed), the age of the oldest due event, the attempts histogram, the
// next due time and the last error; with a running relay also its polling
// delay, the circuit state of each destination and the throughput. It
// lists the relay instances that sent a heartbeat, the keys of ordered
// types parked behind a dead letter, and the dead letters themselves, with
// filters and cursor pagination; dead letters can be retried, resolved or
// deleted one by one or in bulk (by ids or by a filter), each with a dry
// run, and every change is written to the log as an audit line naming the
// token that made it.
//
// Security is not optional: every route, the dashboard's static files
// included, needs a bearer token (or the session cookie the dashboard's
// login sets from one). The read token reads; the admin token also
// changes. Tokens are compared in constant time. Requests whose Host is not
// on the allowlist and cross-origin unsafe requests
// (http.CrossOriginProtection) are refused with 403, GET never changes
// anything, responses carry a strict Content-Security-Policy, bodies are
// size-limited, and payloads are shown as JSON strings the dashboard puts
// into the page as text, never as markup. Errors are RFC 9457 problem
// details; bad input is a 4xx, never a 500.
//
// For a relay with tenants (Config.Tenants) every route moves under
// /api/v1/tenants/{tenant}/ and serves that tenant's outbox, and
// GET /api/v1/tenants lists the tenants with their states and counts
// (docs/operations.md, "Tenants").
//
// Other handlers (metrics, health probes) mount on the same handler with
// Handle, behind the same checks.
package admin
