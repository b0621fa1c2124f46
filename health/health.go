package health

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/store"
)

// Defaults of Config.
const (
	DefaultCacheFor = 2 * time.Second
	DefaultTimeout  = 3 * time.Second
	// DefaultRejectThreshold is how long a destination may refuse every
	// message of a type, acknowledging none, before /readyz reports it:
	// longer than a burst of poison messages, shorter than an operator
	// would want to learn of a missing stream, exchange or URL.
	DefaultRejectThreshold = time.Minute
)

// Config configures a Checker.
type Config struct {
	// Store is the database to check: a dialect driver (for a
	// *config.Store, its Driver field). Required.
	Store store.SchemaVersioner
	// Relay, when set, adds its circuits, claim errors and job errors as
	// degraded reasons, and makes the process not ready once it stopped.
	Relay interface{ Health() relay.Health }
	// Stats, with LagThreshold, feeds the lag check; a dialect driver
	// implements it (store.Inspector). Nil turns the lag check off.
	Stats interface {
		OutboxInspect(ctx context.Context) ([]*store.OutboxTypeDetail, error)
	}
	// LagThreshold is the lag (store.OutboxTypeDetail.OldestDueAge) above
	// which an event type makes the process degraded. 0 turns the lag
	// check off.
	LagThreshold time.Duration
	// Horizon, with HorizonThreshold, feeds the commit horizon check
	// (docs/concepts.md, "Ordering"); the PostgreSQL driver implements it
	// (store.HorizonInspector). Nil turns the check off.
	Horizon store.HorizonInspector
	// HorizonThreshold is how long a transaction may hold a transaction
	// id, and with it the commit horizon of every ordered type, before
	// the process is degraded, with the holder named. 0 turns the check
	// off.
	HorizonThreshold time.Duration
	// Fence is the former name of Horizon, used when Horizon is nil.
	//
	// Deprecated: use Horizon.
	Fence store.FenceInspector
	// FenceThreshold is the former name of HorizonThreshold, used when
	// HorizonThreshold is 0.
	//
	// Deprecated: use HorizonThreshold.
	FenceThreshold time.Duration
	// FailWhenDegraded makes /readyz answer 503 when degraded, not only
	// when not ready.
	FailWhenDegraded bool
	// CacheFor is how long the database checks' result is reused.
	// Defaults to DefaultCacheFor.
	CacheFor time.Duration
	// Timeout bounds the database checks. Defaults to DefaultTimeout.
	Timeout time.Duration
	// RejectThreshold is how long the destination of a type may refuse
	// its messages (rejected or failed for good, not an outage) while it
	// acknowledges none before the type makes the process degraded
	// (ReasonRejecting). Defaults to DefaultRejectThreshold; negative
	// turns the check off.
	RejectThreshold time.Duration
}

// Statuses of a Report.
const (
	StatusOK          = "ok"
	StatusDegraded    = "degraded"
	StatusUnavailable = "unavailable"
)

// Reason kinds.
const (
	ReasonDatabase     = "database_error"
	ReasonMigrations   = "migrations_not_current"
	ReasonRelayStopped = "relay_not_running"
	ReasonCircuitOpen  = "circuit_open"
	ReasonClaimFailing = "claim_failing"
	ReasonJobFailing   = "job_failing"
	ReasonLag          = "lag_over_threshold"
	// ReasonHorizonHeld: a transaction has held the commit horizon of the
	// ordered types longer than HorizonThreshold; the reason's subject
	// names it. Until this release the kind was "ordering_fence_held"
	// (docs/upgrading.md).
	ReasonHorizonHeld = "commit_horizon_held"
	// ReasonFenceHeld is the former name of ReasonHorizonHeld. Its value
	// changed with the name: /readyz reports "commit_horizon_held" where
	// it reported "ordering_fence_held".
	//
	// Deprecated: use ReasonHorizonHeld.
	ReasonFenceHeld = ReasonHorizonHeld
	// ReasonSendsOutstanding: the lock claims have used up their budget
	// and wait, while the batches holding it wait on their destination
	// (docs/operations.md, "Connection pool"): the broker is slow, the
	// database is not.
	ReasonSendsOutstanding = "sends_outstanding"
	// ReasonRejecting: a type's destination has refused its messages for
	// longer than RejectThreshold and acknowledged none (no stream bound
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
)

// Report is what /readyz answers.
type Report struct {
	// Status is StatusOK, StatusDegraded or StatusUnavailable.
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
	Reasons []Reason `json:"reasons,omitempty"`
	// CheckedAt is when the database was last checked.
	CheckedAt time.Time `json:"checked_at"`
}

// Reason is one thing wrong.
type Reason struct {
	// Kind is one of the Reason* constants.
	Kind string `json:"kind"`
	// Subject names what it is about: an event type, "sender" or
	// "sender destination", a job; empty for the database.
	Subject string `json:"subject,omitempty"`
	// Detail is a human-readable explanation (the error text).
	Detail string `json:"detail,omitempty"`
}

// Checker answers the probes. It is safe for concurrent use.
type Checker struct {
	cfg Config

	mu      sync.Mutex
	checked time.Time
	db      dbResult
}

// dbResult is the cached outcome of the database checks.
type dbResult struct {
	version, latest int
	reasons         []Reason
}

// New checks cfg and returns a Checker.
func New(cfg Config) (*Checker, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("health: Config.Store is required")
	}
	if cfg.Horizon == nil && cfg.Fence != nil {
		cfg.Horizon = fenceInspector{cfg.Fence}
	}
	if cfg.HorizonThreshold == 0 {
		cfg.HorizonThreshold = cfg.FenceThreshold
	}
	if cfg.LagThreshold < 0 || cfg.HorizonThreshold < 0 || cfg.CacheFor < 0 || cfg.Timeout < 0 {
		return nil, fmt.Errorf("health: LagThreshold, HorizonThreshold, CacheFor and Timeout must not be negative")
	}
	if cfg.CacheFor == 0 {
		cfg.CacheFor = DefaultCacheFor
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.RejectThreshold == 0 {
		cfg.RejectThreshold = DefaultRejectThreshold
	}
	return &Checker{cfg: cfg}, nil
}

// Check returns the current report: the database checks (cached for
// CacheFor) and the relay's state (always fresh, it costs no query).
func (c *Checker) Check(ctx context.Context) Report {
	db, at := c.database(ctx)
	rep := Report{SchemaVersion: db.version, LatestSchemaVersion: db.latest, CheckedAt: at}
	var fatal, degraded []Reason
	for _, r := range db.reasons {
		if r.Kind == ReasonLag || r.Kind == ReasonHorizonHeld {
			degraded = append(degraded, r)
		} else {
			fatal = append(fatal, r)
		}
	}
	if c.cfg.Relay != nil {
		h := c.cfg.Relay.Health()
		if !h.Running {
			fatal = append(fatal, Reason{Kind: ReasonRelayStopped, Subject: h.InstanceID, Detail: "the relay is not started or is stopping"})
		}
		degraded = append(degraded, relayReasons(h)...)
		degraded = append(degraded, rejecting(h, c.cfg.RejectThreshold, time.Now())...)
	}
	switch {
	case len(fatal) > 0:
		rep.Status = StatusUnavailable
	case len(degraded) > 0:
		rep.Status, rep.Ready = StatusDegraded, true
	default:
		rep.Status, rep.Ready = StatusOK, true
	}
	rep.Reasons = append(fatal, degraded...)
	sort.SliceStable(rep.Reasons, func(i, j int) bool {
		a, b := rep.Reasons[i], rep.Reasons[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Subject < b.Subject
	})
	return rep
}

// relayReasons turns a relay's health into degraded reasons.
func relayReasons(h relay.Health) []Reason {
	var out []Reason
	for _, ch := range h.Circuits {
		if ch.State == relay.CircuitClosed {
			continue
		}
		subject := ch.Sender
		if !ch.Connection {
			subject += " " + ch.Destination
		}
		out = append(out, Reason{Kind: ReasonCircuitOpen, Subject: subject, Detail: ch.State.String() + ": " + ch.LastError})
	}
	for _, th := range h.Types {
		if th.LastError != "" {
			out = append(out, Reason{Kind: ReasonClaimFailing, Subject: th.EventType, Detail: th.LastError})
		}
	}
	for job, msg := range h.JobErrors {
		out = append(out, Reason{Kind: ReasonJobFailing, Subject: job, Detail: msg})
	}
	if r, ok := sendsOutstanding(h, time.Now()); ok {
		out = append(out, r)
	}
	return append(out, streamReasons(h.Stream)...)
}

// streamReasons are the stream's reasons: failing to stream, a slot
// past its lag threshold or lost. A standby is healthy: another relay
// streams.
func streamReasons(st *relay.StreamHealth) []Reason {
	if st == nil {
		return nil
	}
	var out []Reason
	switch st.State {
	case relay.StreamFailing:
		out = append(out, Reason{Kind: ReasonStream, Subject: "stream", Detail: "cannot stream: " + st.LastError})
	case relay.StreamStarting:
		out = append(out, Reason{Kind: ReasonStream, Subject: "stream", Detail: "not streaming yet"})
	}
	if sl := st.Slot; sl != nil {
		if st.Lagging {
			out = append(out, Reason{Kind: ReasonStream, Subject: sl.Slot,
				Detail: fmt.Sprintf("the slot pins %d bytes of WAL to restart_lsn and %d to confirmed_flush_lsn, past the lag threshold", sl.RestartLag, sl.FlushLag)})
		}
		if sl.WALStatus == "lost" || sl.WALStatus == "unreserved" {
			out = append(out, Reason{Kind: ReasonStream, Subject: sl.Slot,
				Detail: "the slot's wal_status is " + sl.WALStatus + ": PostgreSQL has removed or will remove WAL the slot needs; see docs/operations.md, WAL mode"})
		}
		if sl.Failover.Verdict == store.FailoverUnsafe {
			out = append(out, Reason{Kind: ReasonFailoverUnsafe, Subject: sl.Slot,
				Detail: "the primary has standbys and the slot is not failover-safe: " + strings.Join(sl.Failover.Problems, "; ") + "; see docs/operations.md, Failover"})
		}
	}
	if st.SlotErr != "" {
		out = append(out, Reason{Kind: ReasonStream, Subject: "slot", Detail: "cannot read the slot's health: " + st.SlotErr})
	}
	if l := st.LastLoss; l != nil && time.Since(l.At) < relay.SlotLossAlert {
		out = append(out, Reason{Kind: ReasonStreamEventsLost, Subject: l.Slot,
			Detail: fmt.Sprintf("the slot was lost (%s) and recreated %s ago: events emitted between LSN %X/%X and %X/%X (last confirmed %s) were not delivered; see docs/operations.md, Failover",
				l.Reason, time.Since(l.At).Round(time.Second), l.From>>32, uint32(l.From), l.To>>32, uint32(l.To), l.LastConfirm.Format(time.RFC3339))})
	}
	return out
}

// rejecting reports the types whose destination has refused their
// messages, acknowledging none, for longer than threshold, and refused one
// within the last threshold: a type that went idle after its last refusal
// (its poison rows dead-lettered) is no longer reported.
func rejecting(h relay.Health, threshold time.Duration, now time.Time) []Reason {
	if threshold < 0 {
		return nil
	}
	var out []Reason
	for _, th := range h.Types {
		if th.RejectingSince.IsZero() || now.Sub(th.RejectingSince) < threshold || now.Sub(th.LastRejected) > threshold {
			continue
		}
		out = append(out, Reason{Kind: ReasonRejecting, Subject: th.EventType,
			Detail: fmt.Sprintf("%s %s has refused every message for %s, none acknowledged; last error: %s",
				th.Sender, th.Destination, now.Sub(th.RejectingSince).Round(time.Second), th.LastRejection)})
	}
	return out
}

// SlowSendAfter is how long the oldest send of a lock-mode type must have
// waited for its destination, while lock claims wait for their budget,
// before /readyz reports ReasonSendsOutstanding: a budget that is merely
// busy with quick sends is not a problem.
const SlowSendAfter = time.Second

// sendsOutstanding reports lock claims that wait for their budget because
// the batches holding it wait on their destination: the cause is the
// broker, not the database.
func sendsOutstanding(h relay.Health, now time.Time) (Reason, bool) {
	lc := h.LockClaims
	if lc.Waiting == 0 {
		return Reason{}, false
	}
	var slowest *relay.TypeHealth
	for i, th := range h.Types {
		if th.Claim != relay.ClaimLock || th.SendingSince.IsZero() {
			continue
		}
		if slowest == nil || th.SendingSince.Before(slowest.SendingSince) {
			slowest = &h.Types[i]
		}
	}
	if slowest == nil || now.Sub(slowest.SendingSince) < SlowSendAfter {
		return Reason{}, false
	}
	return Reason{Kind: ReasonSendsOutstanding, Subject: slowest.Sender + " " + slowest.Destination,
		Detail: fmt.Sprintf("the destination is slow to acknowledge: a send of %s has waited %s; the lock claims' budget is used up (%d of %d batches hold a connection, %d claims wait)",
			slowest.EventType, now.Sub(slowest.SendingSince).Round(time.Millisecond), lc.Held, lc.Budget, lc.Waiting)}, true
}

// database runs the database checks, or returns the cached result while
// it is younger than CacheFor. Concurrent probes share one check.
func (c *Checker) database(ctx context.Context) (dbResult, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.checked.IsZero() && time.Since(c.checked) < c.cfg.CacheFor {
		return c.db, c.checked
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.Timeout)
	defer cancel()
	res := dbResult{latest: c.cfg.Store.LatestSchemaVersion()}
	v, err := c.cfg.Store.SchemaVersion(ctx)
	switch {
	case err != nil:
		res.reasons = append(res.reasons, Reason{Kind: ReasonDatabase, Detail: err.Error()})
	case v != res.latest:
		res.version = v
		res.reasons = append(res.reasons, Reason{Kind: ReasonMigrations,
			Detail: fmt.Sprintf("schema version %d, this build needs %d: run txbox migrate", v, res.latest)})
	default:
		res.version = v
	}
	if err == nil && c.cfg.Stats != nil && c.cfg.LagThreshold > 0 {
		res.reasons = append(res.reasons, c.lag(ctx)...)
	}
	if err == nil && c.cfg.Horizon != nil && c.cfg.HorizonThreshold > 0 {
		res.reasons = append(res.reasons, c.horizon(ctx)...)
	}
	c.db, c.checked = res, time.Now()
	return res, c.checked
}

// lag reports the types whose lag is over the threshold.
func (c *Checker) lag(ctx context.Context) []Reason {
	stats, err := c.cfg.Stats.OutboxInspect(ctx)
	if err != nil {
		return []Reason{{Kind: ReasonDatabase, Detail: "outbox inspect: " + err.Error()}}
	}
	var out []Reason
	for _, s := range stats {
		if s.OldestDueAge > c.cfg.LagThreshold {
			out = append(out, Reason{Kind: ReasonLag, Subject: s.EventType,
				Detail: fmt.Sprintf("oldest due event is %s old, threshold %s", s.OldestDueAge.Round(time.Millisecond), c.cfg.LagThreshold)})
		}
	}
	return out
}

// horizon reports the transaction that holds the commit horizon, when it
// has held it longer than the threshold.
func (c *Checker) horizon(ctx context.Context) []Reason {
	h, err := c.cfg.Horizon.OutboxHorizonHolder(ctx)
	if err != nil {
		return []Reason{{Kind: ReasonDatabase, Detail: "commit horizon: " + err.Error()}}
	}
	if h == nil || h.Age <= c.cfg.HorizonThreshold {
		return nil
	}
	return []Reason{{Kind: ReasonHorizonHeld, Subject: h.Name(),
		Detail: fmt.Sprintf("has held transaction id %d for %s (threshold %s): events of ordered types published after it began wait until it ends",
			h.XID, h.Age.Round(time.Millisecond), c.cfg.HorizonThreshold)}}
}

// LivezHandler answers 200 "ok" to GET and HEAD: the process is alive
// enough to answer. It checks nothing else, so a database outage does not
// get the process restarted.
func (c *Checker) LivezHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowed(w, r) {
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte("ok\n"))
	})
}

// ReadyzHandler answers GET and HEAD with the Report as JSON: 200 when
// ready (also when degraded, unless Config.FailWhenDegraded), 503 when
// not.
func (c *Checker) ReadyzHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowed(w, r) {
			return
		}
		rep := c.Check(r.Context())
		code := http.StatusOK
		if !rep.Ready || c.cfg.FailWhenDegraded && rep.Status == StatusDegraded {
			code = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		if r.Method != http.MethodHead {
			_ = json.NewEncoder(w).Encode(rep)
		}
	})
}

// Handler serves /livez and /readyz; any other path is 404.
func (c *Checker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/livez", c.LivezHandler())
	mux.Handle("/readyz", c.ReadyzHandler())
	return mux
}

// allowed answers 405 to anything but GET and HEAD: probes never change
// anything.
func allowed(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	return false
}

// fenceInspector serves the deprecated Config.Fence as a HorizonInspector.
type fenceInspector struct{ store.FenceInspector }

func (f fenceInspector) OutboxHorizonHolder(ctx context.Context) (*store.HorizonHolder, error) {
	return f.OutboxFenceHolder(ctx)
}
