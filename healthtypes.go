package txbox

import "time"

// The health report /readyz answers, its reasons and their kinds, in the
// leaf package with the relay's vocabulary (relaytypes.go) so that a probe
// client or an alerting tool reads them without importing package health
// (docs/architecture.md, "Where the public types live"). Package health
// keeps deprecated aliases for one release (docs/upgrading.md).

// Statuses of a HealthReport.
const (
	HealthOK          = "ok"
	HealthDegraded    = "degraded"
	HealthUnavailable = "unavailable"
)

// Kinds of a HealthReason.
const (
	ReasonDatabase     = "database_error"
	ReasonMigrations   = "migrations_not_current"
	ReasonRelayStopped = "relay_not_running"
	ReasonCircuitOpen  = "circuit_open"
	ReasonClaimFailing = "claim_failing"
	ReasonJobFailing   = "job_failing"
	ReasonLag          = "lag_over_threshold"
	// ReasonHorizonHeld: a transaction has held the commit horizon of the
	// ordered types longer than health.Config.HorizonThreshold; the reason's subject
	// names it. Until this release the kind was "ordering_fence_held"
	// (docs/upgrading.md).
	ReasonHorizonHeld = "commit_horizon_held"
	// ReasonSendsOutstanding: the lock claims have used up their budget
	// and wait, while the batches holding it wait on their destination
	// (docs/operations.md, "Connection pool"): the broker is slow, the
	// database is not.
	ReasonSendsOutstanding = "sends_outstanding"
	// ReasonRejecting: a type's destination has refused its messages for
	// longer than health.Config.RejectThreshold and acknowledged none (no stream bound
	// to a subject, a missing exchange, a webhook answering 404).
	ReasonRejecting = "destination_rejecting"
	// ReasonStream: WAL mode's stream cannot be opened or read, or the
	// slot pins more WAL than database.wal.lag-threshold, or PostgreSQL
	// invalidated it (docs/operations.md, "WAL mode").
	ReasonStream = "stream_unhealthy"
	// ReasonStreamEventsLost: the database lost WAL mode's slot (a
	// failover to a standby without it, an invalidation) and a new one
	// was made within relay.SlotLossAlert: the events emitted after the
	// last confirm were not delivered (docs/operations.md, "Failover").
	ReasonStreamEventsLost = "stream_events_lost"
	// ReasonFailoverUnsafe: the primary has standbys and WAL mode's slot
	// would not survive the promotion of one, or would lose events in it
	// (store.FailoverUnsafe; docs/operations.md, "Failover"). A verdict
	// of unknown (the standbys could not be read) is not a reason: txbox
	// status and the admin API show it.
	ReasonFailoverUnsafe = "slot_not_failover_safe"
	// ReasonTenantFailing: a tenant of a relay that serves tenants
	// (docs/multi-tenant.md) could not be opened or started (its
	// database is down, refuses connections, or is not migrated); the
	// other tenants go on, and it is tried again. The reason's Tenant
	// names it.
	ReasonTenantFailing = "tenant_failing"
	// ReasonTenantsList: the tenants could not be listed again
	// (tenants-query failed); the tenants run as last listed.
	ReasonTenantsList = "tenants_list_failing"
	// ReasonTenantsWatch: the watch of the parked tenants of a database
	// (docs/multi-tenant.md, "Idle tenants") lost its connection or its
	// sweep failed; their wake-ups wait until it is back.
	ReasonTenantsWatch = "tenants_watch_failing"
)

// HealthReport is what /readyz answers (package health's Checker).
type HealthReport struct {
	// Status is HealthOK, HealthDegraded or HealthUnavailable.
	Status string `json:"status"`
	// Ready is false when Status is StatusUnavailable.
	Ready bool `json:"ready"`
	// SchemaVersion is the database's applied migration version and
	// LatestSchemaVersion this build's; they differ when migrations are
	// not current.
	SchemaVersion       int `json:"schema_version"`
	LatestSchemaVersion int `json:"latest_schema_version"`
	// Reasons say why the process is degraded or not ready, sorted by
	// kind then subject.
	Reasons []HealthReason `json:"reasons,omitempty"`
	// CheckedAt is when the database was last checked.
	CheckedAt time.Time `json:"checked_at"`
}

// HealthReason is one thing wrong.
type HealthReason struct {
	// Kind is one of the Reason* constants.
	Kind string `json:"kind"`
	// Subject names what it is about: an event type, "sender" or
	// "sender destination", a job; empty for the database.
	Subject string `json:"subject,omitempty"`
	// Detail is a human-readable explanation (the error text).
	Detail string `json:"detail,omitempty"`
	// Tenant names the tenant the reason is about, on a relay that
	// serves tenants; empty otherwise.
	Tenant string `json:"tenant,omitempty"`
}
