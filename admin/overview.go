package admin

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/store"
)

// Recorder is a txbox.RelayHook that counts, per event type, the messages the
// relay sent, retried and failed, for the dashboard's throughput. Add it
// to relay.Config.Hooks and to Config.Recorder. The zero Recorder is
// ready to use.
type Recorder struct {
	txbox.NopRelayHook
	m sync.Map // event type -> *counters
}

var _ txbox.RelayHook = (*Recorder)(nil)

type counters struct{ sent, retried, failed atomic.Int64 }

// OnBatch counts the batch's outcomes.
func (rc *Recorder) OnBatch(ev txbox.BatchEvent) {
	v, _ := rc.m.LoadOrStore(ev.EventType, &counters{})
	c := v.(*counters)
	c.sent.Add(int64(ev.Sent))
	c.retried.Add(int64(ev.Retried))
	c.failed.Add(int64(ev.Failed))
}

func (rc *Recorder) get(typ string) (sent, retried, failed int64, ok bool) {
	if rc == nil {
		return 0, 0, 0, false
	}
	v, ok := rc.m.Load(typ)
	if !ok {
		return 0, 0, 0, false
	}
	c := v.(*counters)
	return c.sent.Load(), c.retried.Load(), c.failed.Load(), true
}

func (rc *Recorder) types() []string {
	if rc == nil {
		return nil
	}
	var out []string
	rc.m.Range(func(k, _ any) bool {
		out = append(out, k.(string))
		return true
	})
	return out
}

// statsCache holds the counting queries' results for Config.StatsTTL.
type statsCache struct {
	mu         sync.Mutex
	at         time.Time
	details    []*store.OutboxTypeDetail
	unresolved int64
	resolved   int64
}

func (c *statsCache) invalidate() {
	c.mu.Lock()
	c.at = time.Time{}
	c.mu.Unlock()
}

func (h *Handler) cachedStats(ctx context.Context) ([]*store.OutboxTypeDetail, int64, int64, error) {
	c := &h.stats
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < h.cfg.StatsTTL {
		return c.details, c.unresolved, c.resolved, nil
	}
	var details []*store.OutboxTypeDetail
	if in, ok := h.cfg.Store.(store.Inspector); ok {
		var err error
		if details, err = in.OutboxInspect(ctx); err != nil {
			return nil, 0, 0, err
		}
	}
	unresolved, err := h.cfg.Store.DeadLetterCount(ctx, &store.DeadLetterFilter{Status: store.DeadLetterUnresolved})
	if err != nil {
		return nil, 0, 0, err
	}
	resolved, err := h.cfg.Store.DeadLetterCount(ctx, &store.DeadLetterFilter{Status: store.DeadLetterResolved})
	if err != nil {
		return nil, 0, 0, err
	}
	c.details, c.unresolved, c.resolved, c.at = details, unresolved, resolved, time.Now()
	return details, unresolved, resolved, nil
}

// TypeView is one event type in the overview.
type TypeView struct {
	EventType string `json:"event_type"`
	Due       int64  `json:"due"`
	Scheduled int64  `json:"scheduled"`
	InProcess int64  `json:"in_process"`
	Failed    int64  `json:"failed"`
	// OldestDueAgeSeconds is the lag: the age of the oldest due event.
	OldestDueAgeSeconds float64 `json:"oldest_due_age_seconds"`
	// NextDueInSeconds is when the earliest scheduled event becomes due;
	// 0 when none is scheduled.
	NextDueInSeconds float64                      `json:"next_due_in_seconds"`
	Attempts         [store.AttemptsBuckets]int64 `json:"attempts"`
	LastError        string                       `json:"last_error,omitempty"`
	// The relay's view, when it runs in this process; absent for a
	// fanned-out type, whose routes each have theirs.
	Polling *PollingView `json:"polling,omitempty"`
	// Routes are the routes of a fanned-out type (docs/concepts.md,
	// "Fan-out"), in their configured order: from Config.Routes, and
	// from the in-process relay's health. The type's counts above are
	// its rows of every route; absent for a type with one route.
	Routes []RouteView `json:"routes,omitempty"`
	// Totals since the relay started, when a Recorder is configured.
	SentTotal    *int64 `json:"sent_total,omitempty"`
	RetriedTotal *int64 `json:"retried_total,omitempty"`
	FailedTotal  *int64 `json:"failed_total,omitempty"`
}

// RouteView is one route of a fanned-out event type: its settings, as the
// configuration resolves them (Config.Routes), and its poller's state.
type RouteView struct {
	// Name is the route's name, the route of its rows and dead letters.
	Name        string `json:"name"`
	Sender      string `json:"sender,omitempty"`
	Destination string `json:"destination,omitempty"`
	// Claim, BatchSize, MaxAttempts and Ordering are the route's
	// effective settings; absent when only the relay's health names the
	// route (Config.Routes unset or not knowing it).
	Claim       string `json:"claim,omitempty"`
	BatchSize   int    `json:"batch_size,omitempty"`
	MaxAttempts int    `json:"max_attempts,omitempty"`
	Ordering    string `json:"ordering,omitempty"`
	// Polling is the route's poller, when the relay runs in this
	// process.
	Polling *PollingView `json:"polling,omitempty"`
}

// PollingView is a poller's state.
type PollingView struct {
	DelaySeconds float64 `json:"delay_seconds"`
	InFlight     int     `json:"in_flight"`
	Sender       string  `json:"sender"`
	Destination  string  `json:"destination,omitempty"`
	// Circuit is the destination's circuit state, "open" also when the
	// sender's connection circuit is open.
	Circuit   string    `json:"circuit"`
	LastPoll  time.Time `json:"last_poll,omitzero"`
	PollError string    `json:"poll_error,omitempty"`
}

// CircuitView is one circuit.
type CircuitView struct {
	Sender      string `json:"sender"`
	Destination string `json:"destination,omitempty"`
	Connection  bool   `json:"connection,omitempty"`
	State       string `json:"state"`
	LastError   string `json:"last_error,omitempty"`
}

// InstanceView is one relay instance's heartbeat.
type InstanceView struct {
	ID             string    `json:"id"`
	Info           string    `json:"info,omitempty"`
	StartedAt      time.Time `json:"started_at"`
	SeenAt         time.Time `json:"seen_at"`
	SeenAgoSeconds float64   `json:"seen_ago_seconds"`
	Expired        bool      `json:"expired"`
}

// Overview is everything the dashboard shows but the dead letters.
type Overview struct {
	Time        time.Time        `json:"time"`
	Relay       *RelayView       `json:"relay,omitempty"`
	Types       []TypeView       `json:"types"`
	Circuits    []CircuitView    `json:"circuits"`
	Instances   []InstanceView   `json:"instances"`
	DeadLetters map[string]int64 `json:"dead_letters"`
	ParkedKeys  int              `json:"parked_keys"`
	// HorizonHolder is the oldest transaction of the database cluster that
	// holds a transaction id, which holds back the commit horizon of every
	// ordered type (docs/concepts.md, "Ordering"); absent when none does
	// or the store has no commit horizon (store.HorizonInspector).
	HorizonHolder *HorizonHolderView `json:"horizon_holder,omitempty"`
	// FenceHolder is HorizonHolder under its former name, kept in the
	// JSON as fence_holder for one release (docs/upgrading.md).
	//
	// Deprecated: use HorizonHolder (JSON horizon_holder).
	FenceHolder *HorizonHolderView `json:"fence_holder,omitempty"`
	// HorizonWatched is true when the overview looked for a horizon
	// holder: the store has a commit horizon and Config.NoCommitHorizon
	// is not set. False: no event type waits for the horizon, and the
	// dashboard says so instead of "not held".
	HorizonWatched bool `json:"horizon_watched"`
	// Stream is WAL mode's stream of the in-process relay and its slot;
	// absent in table mode (docs/concepts.md, "WAL mode").
	Stream *StreamView `json:"stream,omitempty"`
}

// StreamView is WAL mode's stream and its replication slot.
type StreamView struct {
	// State is starting, streaming, standby (another relay streams) or
	// failing.
	State     string `json:"state"`
	LastError string `json:"last_error,omitempty"`
	// LastConfirmAgeSeconds is how long ago this relay last confirmed a
	// position; absent before its first.
	LastConfirmAgeSeconds *float64 `json:"last_confirm_age_seconds,omitempty"`
	HeldEvents            int      `json:"held_events"`
	SpilledEvents         int64    `json:"spilled_events"`
	// Pauses counts the times the relay found it had been stopped past
	// its pause limit and dropped what it held (relay.StreamHealth).
	Pauses  int64 `json:"pauses"`
	Lagging bool  `json:"lagging"`
	// Slot is the last reading of the slot, absent before the first.
	Slot    *store.StreamStatus `json:"slot,omitempty"`
	SlotErr string              `json:"slot_error,omitempty"`
}

func streamView(st *relay.StreamHealth) *StreamView {
	if st == nil {
		return nil
	}
	v := &StreamView{State: string(st.State), LastError: st.LastError, HeldEvents: st.Held, SpilledEvents: st.Spilled,
		Pauses: st.Pauses, Lagging: st.Lagging, Slot: st.Slot, SlotErr: st.SlotErr}
	if !st.LastConfirm.IsZero() {
		age := time.Since(st.LastConfirm).Seconds()
		v.LastConfirmAgeSeconds = &age
	}
	return v
}

// HorizonHolderView is the transaction that holds the commit horizon back.
type HorizonHolderView struct {
	store.HorizonHolder
	// Name says who it is, for people (store.HorizonHolder.Name).
	Name string `json:"name"`
	// AgeSeconds is how long it has been open.
	AgeSeconds float64 `json:"age_seconds"`
}

// FenceHolderView is the former name of HorizonHolderView.
//
// Deprecated: use HorizonHolderView.
type FenceHolderView = HorizonHolderView

// RelayView is the in-process relay's state.
type RelayView struct {
	InstanceID string            `json:"instance_id"`
	Running    bool              `json:"running"`
	Degraded   bool              `json:"degraded"`
	JobErrors  map[string]string `json:"job_errors,omitempty"`
}

func seconds(d time.Duration) float64 { return d.Seconds() }

func (h *Handler) typeViews(details []*store.OutboxTypeDetail, health *relay.Health) []TypeView {
	byType := map[string]*TypeView{}
	get := func(t string) *TypeView {
		v := byType[t]
		if v == nil {
			v = &TypeView{EventType: t}
			byType[t] = v
		}
		return v
	}
	for _, d := range details {
		v := get(d.EventType)
		v.Due, v.Scheduled, v.InProcess, v.Failed = d.Due, d.Scheduled, d.InProcess, d.Failed
		v.OldestDueAgeSeconds, v.NextDueInSeconds = seconds(d.OldestDueAge), seconds(d.NextDueIn)
		v.Attempts, v.LastError = d.Attempts, d.LastError
	}
	if health != nil {
		circuit := map[[2]string]string{}
		connOpen := map[string]string{}
		for _, c := range health.Circuits {
			if c.Connection {
				connOpen[c.Sender] = c.State.String()
			} else {
				circuit[[2]string{c.Sender, c.Destination}] = c.State.String()
			}
		}
		for _, th := range health.Types {
			if th.Claim == txbox.ClaimStream {
				continue // a WAL-mode lane: the stream's view says how it goes
			}
			v := get(th.EventType)
			state := circuit[[2]string{th.Sender, th.Destination}]
			if state == "" {
				state = txbox.CircuitClosed.String()
			}
			if cs := connOpen[th.Sender]; cs != "" && cs != txbox.CircuitClosed.String() {
				state = cs
			}
			p := &PollingView{DelaySeconds: seconds(th.Delay), InFlight: th.InFlight, Sender: th.Sender,
				Destination: th.Destination, Circuit: state, LastPoll: th.LastPoll, PollError: th.LastError}
			if th.Route == "" {
				v.Polling = p
				continue
			}
			h.configRoutes(v)
			i := slices.IndexFunc(v.Routes, func(r RouteView) bool { return r.Name == th.Route })
			if i < 0 {
				v.Routes = append(v.Routes, RouteView{Name: th.Route, Sender: th.Sender, Destination: th.Destination})
				i = len(v.Routes) - 1
			}
			v.Routes[i].Polling = p
		}
	}
	for _, t := range h.cfg.Recorder.types() {
		get(t)
	}
	out := make([]TypeView, 0, len(byType))
	for t, v := range byType {
		h.configRoutes(v)
		if s, r, f, ok := h.cfg.Recorder.get(t); ok {
			v.SentTotal, v.RetriedTotal, v.FailedTotal = &s, &r, &f
		} else if h.cfg.Recorder != nil {
			var zero1, zero2, zero3 int64
			v.SentTotal, v.RetriedTotal, v.FailedTotal = &zero1, &zero2, &zero3
		}
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].EventType < out[j].EventType })
	return out
}

// configRoutes sets v's routes from Config.Routes, once.
func (h *Handler) configRoutes(v *TypeView) {
	if v.Routes != nil || h.cfg.Routes == nil {
		return
	}
	v.Routes = slices.Clone(h.cfg.Routes(v.EventType))
}

func (h *Handler) health() *relay.Health {
	if h.cfg.Relay == nil {
		return nil
	}
	hl := h.cfg.Relay.Health()
	return &hl
}

func (h *Handler) types(w http.ResponseWriter, r *http.Request) {
	if !noParams(w, r, h) {
		return
	}
	details, _, _, err := h.cachedStats(r.Context())
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"types": h.typeViews(details, h.health())})
}

// noParams refuses a query string on routes that take none.
func noParams(w http.ResponseWriter, r *http.Request, h *Handler) bool {
	var errs paramErrors
	for k := range r.URL.Query() {
		errs.add(clipParam(k), "unknown parameter")
	}
	if len(errs) > 0 {
		h.writeError(w, r, errs)
		return false
	}
	return true
}

func (h *Handler) instanceViews(ctx context.Context) ([]InstanceView, error) {
	out := []InstanceView{}
	in, ok := h.cfg.Store.(store.Instances)
	if !ok {
		return out, nil
	}
	all, err := in.InstanceList(ctx)
	if err != nil {
		return nil, err
	}
	for _, x := range all {
		out = append(out, InstanceView{ID: x.ID, Info: x.Info, StartedAt: x.StartedAt.UTC(), SeenAt: x.SeenAt.UTC(),
			SeenAgoSeconds: seconds(x.SeenAgo), Expired: x.Expired})
	}
	return out, nil
}

func (h *Handler) instances(w http.ResponseWriter, r *http.Request) {
	if !noParams(w, r, h) {
		return
	}
	out, err := h.instanceViews(r.Context())
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"instances": out})
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	if !noParams(w, r, h) {
		return
	}
	ctx := r.Context()
	details, unresolved, resolved, err := h.cachedStats(ctx)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	health := h.health()
	ov := Overview{
		Time:        time.Now().UTC(),
		Types:       h.typeViews(details, health),
		Circuits:    []CircuitView{},
		DeadLetters: map[string]int64{"unresolved": unresolved, "resolved": resolved},
	}
	if health != nil {
		ov.Relay = &RelayView{InstanceID: health.InstanceID, Running: health.Running, Degraded: health.Degraded, JobErrors: health.JobErrors}
		ov.Stream = streamView(health.Stream)
		for _, c := range health.Circuits {
			ov.Circuits = append(ov.Circuits, CircuitView{Sender: c.Sender, Destination: c.Destination, Connection: c.Connection,
				State: c.State.String(), LastError: c.LastError})
		}
	}
	if ov.Instances, err = h.instanceViews(ctx); err != nil {
		h.writeError(w, r, err)
		return
	}
	parked, err := h.parked(ctx, "", maxParked)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	ov.ParkedKeys = len(parked)
	if fi, ok := h.cfg.Store.(store.HorizonInspector); ok && !h.cfg.NoCommitHorizon {
		ov.HorizonWatched = true
		fh, err := fi.OutboxHorizonHolder(ctx)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		if fh != nil {
			ov.HorizonHolder = &HorizonHolderView{HorizonHolder: *fh, Name: fh.Name(), AgeSeconds: seconds(fh.Age)}
			ov.FenceHolder = ov.HorizonHolder
		}
	}
	writeJSON(w, http.StatusOK, ov)
}

// ParkedKeyView is one key held back by a dead letter.
type ParkedKeyView struct {
	EventType    string    `json:"event_type"`
	Key          string    `json:"key"`
	DeadLetterID string    `json:"dead_letter_id"`
	FailedAt     time.Time `json:"failed_at"`
	LastError    string    `json:"last_error"`
	DeadLetters  int64     `json:"dead_letters"`
	Waiting      int64     `json:"waiting"`
}

// maxParked bounds one parked-keys answer.
const maxParked = 1000

func (h *Handler) parked(ctx context.Context, typ string, limit int) ([]ParkedKeyView, error) {
	out := []ParkedKeyView{}
	in, ok := h.cfg.Store.(store.Inspector)
	if !ok {
		return out, nil
	}
	// Non-ordered types' keys are filtered out here, so ask for more.
	ask := limit
	if h.cfg.Ordered != nil {
		ask = maxParked
	}
	all, err := in.DeadLetterParkedKeys(ctx, &store.ParkedKeysParams{EventType: typ, Limit: ask})
	if err != nil {
		return nil, err
	}
	for _, p := range all {
		if h.cfg.Ordered != nil && !h.cfg.Ordered(p.EventType) {
			continue
		}
		if len(out) == limit {
			break
		}
		out = append(out, ParkedKeyView{EventType: p.EventType, Key: p.Key, DeadLetterID: p.DeadLetterID.String(),
			FailedAt: p.FailedAt.UTC(), LastError: p.LastError, DeadLetters: p.DeadLetters, Waiting: p.Waiting})
	}
	return out, nil
}

// parkedParams are the parameters of the parked keys' listing.
var parkedParams = map[string]bool{"type": true, "limit": true}

func (h *Handler) parkedKeys(w http.ResponseWriter, r *http.Request) {
	var errs paramErrors
	q := r.URL.Query()
	checkParams(q, parkedParams, &errs)
	typ := q.Get("type")
	if typ != "" && txbox.ValidateEventType(typ) != nil {
		errs.add("type", "not a valid event type")
	}
	limit := limitParam(q, 100, maxParked, &errs)
	if len(errs) > 0 {
		h.writeError(w, r, errs)
		return
	}
	out, err := h.parked(r.Context(), typ, limit)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"parked_keys": out})
}
