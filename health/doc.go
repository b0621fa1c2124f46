// Package health serves liveness and readiness probes for a process that
// runs a relay, for process supervisors and Kubernetes:
//
//	GET /livez   200 while the process can answer at all
//	GET /readyz  200 when the database is reachable and its schema is
//	             current, 503 otherwise; the body is a JSON txbox.HealthReport that
//	             says "ok" or "degraded" with reasons (a circuit open, a
//	             claim or a background job failing, lag over a threshold)
//
// Checker.Handler serves both; Checker.LivezHandler and
// Checker.ReadyzHandler can be mounted on any mux (an admin server, next
// to /metrics). The probes reveal no payloads, ids or credentials, so they
// can be served without a token on a listener of their own: `txbox
// relay` does with health.listen (docs/operations.md, "Health").
//
// The database checks are one schema-version query, plus one stats query
// when a lag threshold is set; their result is cached for
// Config.CacheFor, so a probe every second costs at most one query per
// interval.
package health
