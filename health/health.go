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

	"github.com/txbox/txbox"
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
	// (txbox.ReasonRejecting). Defaults to DefaultRejectThreshold; negative
	// turns the check off.
	RejectThreshold time.Duration
}

// Statuses of a Report, now in package txbox.
const (
	// StatusOK is txbox.HealthOK.
	//
	// Deprecated: use txbox.HealthOK.
	StatusOK = txbox.HealthOK
	// StatusDegraded is txbox.HealthDegraded.
	//
	// Deprecated: use txbox.HealthDegraded.
	StatusDegraded = txbox.HealthDegraded
	// StatusUnavailable is txbox.HealthUnavailable.
	//
	// Deprecated: use txbox.HealthUnavailable.
	StatusUnavailable = txbox.HealthUnavailable
)

// Reason kinds, now in package txbox.
const (
	// ReasonDatabase is txbox.ReasonDatabase.
	//
	// Deprecated: use txbox.ReasonDatabase.
	ReasonDatabase = txbox.ReasonDatabase
	// ReasonMigrations is txbox.ReasonMigrations.
	//
	// Deprecated: use txbox.ReasonMigrations.
	ReasonMigrations = txbox.ReasonMigrations
	// ReasonRelayStopped is txbox.ReasonRelayStopped.
	//
	// Deprecated: use txbox.ReasonRelayStopped.
	ReasonRelayStopped = txbox.ReasonRelayStopped
	// ReasonCircuitOpen is txbox.ReasonCircuitOpen.
	//
	// Deprecated: use txbox.ReasonCircuitOpen.
	ReasonCircuitOpen = txbox.ReasonCircuitOpen
	// ReasonClaimFailing is txbox.ReasonClaimFailing.
	//
	// Deprecated: use txbox.ReasonClaimFailing.
	ReasonClaimFailing = txbox.ReasonClaimFailing
	// ReasonJobFailing is txbox.ReasonJobFailing.
	//
	// Deprecated: use txbox.ReasonJobFailing.
	ReasonJobFailing = txbox.ReasonJobFailing
	// ReasonLag is txbox.ReasonLag.
	//
	// Deprecated: use txbox.ReasonLag.
	ReasonLag = txbox.ReasonLag
	// ReasonHorizonHeld is txbox.ReasonHorizonHeld.
	//
	// Deprecated: use txbox.ReasonHorizonHeld.
	ReasonHorizonHeld = txbox.ReasonHorizonHeld
	// ReasonSendsOutstanding is txbox.ReasonSendsOutstanding.
	//
	// Deprecated: use txbox.ReasonSendsOutstanding.
	ReasonSendsOutstanding = txbox.ReasonSendsOutstanding
	// ReasonRejecting is txbox.ReasonRejecting.
	//
	// Deprecated: use txbox.ReasonRejecting.
	ReasonRejecting = txbox.ReasonRejecting
	// ReasonStream is txbox.ReasonStream.
	//
	// Deprecated: use txbox.ReasonStream.
	ReasonStream = txbox.ReasonStream
	// ReasonStreamEventsLost is txbox.ReasonStreamEventsLost.
	//
	// Deprecated: use txbox.ReasonStreamEventsLost.
	ReasonStreamEventsLost = txbox.ReasonStreamEventsLost
	// ReasonFailoverUnsafe is txbox.ReasonFailoverUnsafe.
	//
	// Deprecated: use txbox.ReasonFailoverUnsafe.
	ReasonFailoverUnsafe = txbox.ReasonFailoverUnsafe
	// ReasonFenceHeld is the former name of txbox.ReasonHorizonHeld. Its
	// value changed with the name: /readyz reports "commit_horizon_held"
	// where it reported "ordering_fence_held".
	//
	// Deprecated: use txbox.ReasonHorizonHeld.
	ReasonFenceHeld = txbox.ReasonHorizonHeld
)

// Report is txbox.HealthReport: what /readyz answers.
//
// Deprecated: use txbox.HealthReport.
type Report = txbox.HealthReport

// Reason is txbox.HealthReason: one thing wrong.
//
// Deprecated: use txbox.HealthReason.
type Reason = txbox.HealthReason

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
	reasons         []txbox.HealthReason
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
func (c *Checker) Check(ctx context.Context) txbox.HealthReport {
	db, at := c.database(ctx)
	rep := txbox.HealthReport{SchemaVersion: db.version, LatestSchemaVersion: db.latest, CheckedAt: at}
	var fatal, degraded []txbox.HealthReason
	for _, r := range db.reasons {
		if r.Kind == txbox.ReasonLag || r.Kind == txbox.ReasonHorizonHeld {
			degraded = append(degraded, r)
		} else {
			fatal = append(fatal, r)
		}
	}
	if c.cfg.Relay != nil {
		h := c.cfg.Relay.Health()
		if !h.Running {
			fatal = append(fatal, txbox.HealthReason{Kind: txbox.ReasonRelayStopped, Subject: h.InstanceID, Detail: "the relay is not started or is stopping"})
		}
		degraded = append(degraded, relayReasons(h)...)
		degraded = append(degraded, rejecting(h, c.cfg.RejectThreshold, time.Now())...)
	}
	switch {
	case len(fatal) > 0:
		rep.Status = txbox.HealthUnavailable
	case len(degraded) > 0:
		rep.Status, rep.Ready = txbox.HealthDegraded, true
	default:
		rep.Status, rep.Ready = txbox.HealthOK, true
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
func relayReasons(h relay.Health) []txbox.HealthReason {
	var out []txbox.HealthReason
	for _, ch := range h.Circuits {
		if ch.State == txbox.CircuitClosed {
			continue
		}
		subject := ch.Sender
		if !ch.Connection {
			subject += " " + ch.Destination
		}
		out = append(out, txbox.HealthReason{Kind: txbox.ReasonCircuitOpen, Subject: subject, Detail: ch.State.String() + ": " + ch.LastError})
	}
	for _, th := range h.Types {
		if th.LastError != "" {
			out = append(out, txbox.HealthReason{Kind: txbox.ReasonClaimFailing, Subject: th.EventType, Detail: th.LastError})
		}
	}
	for job, msg := range h.JobErrors {
		out = append(out, txbox.HealthReason{Kind: txbox.ReasonJobFailing, Subject: job, Detail: msg})
	}
	if r, ok := sendsOutstanding(h, time.Now()); ok {
		out = append(out, r)
	}
	return append(out, streamReasons(h.Stream)...)
}

// streamReasons are the stream's reasons: failing to stream, a slot
// past its lag threshold or lost. A standby is healthy: another relay
// streams.
func streamReasons(st *relay.StreamHealth) []txbox.HealthReason {
	if st == nil {
		return nil
	}
	var out []txbox.HealthReason
	switch st.State {
	case relay.StreamFailing:
		out = append(out, txbox.HealthReason{Kind: txbox.ReasonStream, Subject: "stream", Detail: "cannot stream: " + st.LastError})
	case relay.StreamStarting:
		out = append(out, txbox.HealthReason{Kind: txbox.ReasonStream, Subject: "stream", Detail: "not streaming yet"})
	}
	if sl := st.Slot; sl != nil {
		if st.Lagging {
			out = append(out, txbox.HealthReason{Kind: txbox.ReasonStream, Subject: sl.Slot,
				Detail: fmt.Sprintf("the slot pins %d bytes of WAL to restart_lsn and %d to confirmed_flush_lsn, past the lag threshold", sl.RestartLag, sl.FlushLag)})
		}
		if sl.WALStatus == "lost" || sl.WALStatus == "unreserved" {
			out = append(out, txbox.HealthReason{Kind: txbox.ReasonStream, Subject: sl.Slot,
				Detail: "the slot's wal_status is " + sl.WALStatus + ": PostgreSQL has removed or will remove WAL the slot needs; see docs/operations.md, WAL mode"})
		}
		if sl.Failover.Verdict == store.FailoverUnsafe {
			out = append(out, txbox.HealthReason{Kind: txbox.ReasonFailoverUnsafe, Subject: sl.Slot,
				Detail: "the primary has standbys and the slot is not failover-safe: " + strings.Join(sl.Failover.Problems, "; ") + "; see docs/operations.md, Failover"})
		}
	}
	if st.SlotErr != "" {
		out = append(out, txbox.HealthReason{Kind: txbox.ReasonStream, Subject: "slot", Detail: "cannot read the slot's health: " + st.SlotErr})
	}
	if l := st.LastLoss; l != nil && time.Since(l.At) < relay.SlotLossAlert {
		out = append(out, txbox.HealthReason{Kind: txbox.ReasonStreamEventsLost, Subject: l.Slot,
			Detail: fmt.Sprintf("the slot was lost (%s) and recreated %s ago: events emitted between LSN %X/%X and %X/%X (last confirmed %s) were not delivered; see docs/operations.md, Failover",
				l.Reason, time.Since(l.At).Round(time.Second), l.From>>32, uint32(l.From), l.To>>32, uint32(l.To), l.LastConfirm.Format(time.RFC3339))})
	}
	return out
}

// rejecting reports the types whose destination has refused their
// messages, acknowledging none, for longer than threshold, and refused one
// within the last threshold: a type that went idle after its last refusal
// (its poison rows dead-lettered) is no longer reported.
func rejecting(h relay.Health, threshold time.Duration, now time.Time) []txbox.HealthReason {
	if threshold < 0 {
		return nil
	}
	var out []txbox.HealthReason
	for _, th := range h.Types {
		if th.RejectingSince.IsZero() || now.Sub(th.RejectingSince) < threshold || now.Sub(th.LastRejected) > threshold {
			continue
		}
		out = append(out, txbox.HealthReason{Kind: txbox.ReasonRejecting, Subject: th.EventType,
			Detail: fmt.Sprintf("%s %s has refused every message for %s, none acknowledged; last error: %s",
				th.Sender, th.Destination, now.Sub(th.RejectingSince).Round(time.Second), th.LastRejection)})
	}
	return out
}

// SlowSendAfter is how long the oldest send of a lock-mode type must have
// waited for its destination, while lock claims wait for their budget,
// before /readyz reports txbox.ReasonSendsOutstanding: a budget that is merely
// busy with quick sends is not a problem.
const SlowSendAfter = time.Second

// sendsOutstanding reports lock claims that wait for their budget because
// the batches holding it wait on their destination: the cause is the
// broker, not the database.
func sendsOutstanding(h relay.Health, now time.Time) (txbox.HealthReason, bool) {
	lc := h.LockClaims
	if lc.Waiting == 0 {
		return txbox.HealthReason{}, false
	}
	var slowest *relay.TypeHealth
	for i, th := range h.Types {
		if th.Claim != txbox.ClaimLock || th.SendingSince.IsZero() {
			continue
		}
		if slowest == nil || th.SendingSince.Before(slowest.SendingSince) {
			slowest = &h.Types[i]
		}
	}
	if slowest == nil || now.Sub(slowest.SendingSince) < SlowSendAfter {
		return txbox.HealthReason{}, false
	}
	return txbox.HealthReason{Kind: txbox.ReasonSendsOutstanding, Subject: slowest.Sender + " " + slowest.Destination,
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
		res.reasons = append(res.reasons, txbox.HealthReason{Kind: txbox.ReasonDatabase, Detail: err.Error()})
	case v != res.latest:
		res.version = v
		res.reasons = append(res.reasons, txbox.HealthReason{Kind: txbox.ReasonMigrations,
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
func (c *Checker) lag(ctx context.Context) []txbox.HealthReason {
	stats, err := c.cfg.Stats.OutboxInspect(ctx)
	if err != nil {
		return []txbox.HealthReason{{Kind: txbox.ReasonDatabase, Detail: "outbox inspect: " + err.Error()}}
	}
	var out []txbox.HealthReason
	for _, s := range stats {
		if s.OldestDueAge > c.cfg.LagThreshold {
			out = append(out, txbox.HealthReason{Kind: txbox.ReasonLag, Subject: s.EventType,
				Detail: fmt.Sprintf("oldest due event is %s old, threshold %s", s.OldestDueAge.Round(time.Millisecond), c.cfg.LagThreshold)})
		}
	}
	return out
}

// horizon reports the transaction that holds the commit horizon, when it
// has held it longer than the threshold.
func (c *Checker) horizon(ctx context.Context) []txbox.HealthReason {
	h, err := c.cfg.Horizon.OutboxHorizonHolder(ctx)
	if err != nil {
		return []txbox.HealthReason{{Kind: txbox.ReasonDatabase, Detail: "commit horizon: " + err.Error()}}
	}
	if h == nil || h.Age <= c.cfg.HorizonThreshold {
		return nil
	}
	return []txbox.HealthReason{{Kind: txbox.ReasonHorizonHeld, Subject: h.Name(),
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

// ReadyzHandler answers GET and HEAD with the txbox.HealthReport as JSON: 200 when
// ready (also when degraded, unless Config.FailWhenDegraded), 503 when
// not.
func (c *Checker) ReadyzHandler() http.Handler {
	return readyzHandler(c.Check, c.cfg.FailWhenDegraded)
}

// readyzHandler answers GET and HEAD with check's report: 200 when ready
// (also when degraded, unless failWhenDegraded), 503 when not.
func readyzHandler(check func(context.Context) txbox.HealthReport, failWhenDegraded bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowed(w, r) {
			return
		}
		rep := check(r.Context())
		code := http.StatusOK
		if !rep.Ready || failWhenDegraded && rep.Status == txbox.HealthDegraded {
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
