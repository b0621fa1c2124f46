package admin

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// A relay with tenants (docs/multi-tenant.md, docs/operations.md,
// "Tenants") serves every API route under /api/v1/tenants/{tenant}/, over
// that tenant's store, and lists the tenants at GET /api/v1/tenants. A
// route without a tenant answers 400 naming the tenants' route; an unknown
// tenant 404; a tenant that is not running (starting, failing, or any
// state without a running relay) 503.

// Tenants is what a Handler serving a relay with tenants reads of them
// (Config.Tenants); txbox relay implements it over its tenant supervisor.
type Tenants interface {
	// List returns at most limit tenants whose names sort after after
	// ("": from the first), in name order, and the error of the last
	// listing of the tenants ("" when it succeeded).
	List(after string, limit int) (tenants []TenantStatus, listErr string)
	// Tenant returns the tenant named name; false when there is none.
	// A tenant in state "parked" (idle, its relay stopped) should be
	// woken by the call: its routes answer 503 with Retry-After 1.
	Tenant(name string) (TenantStatus, bool)
}

// TenantStatus is one tenant as its supervisor sees it.
type TenantStatus struct {
	// Name is the tenant's name.
	Name string
	// State is the supervisor's state of the tenant: "starting",
	// "running", "failing", ...
	State string
	// Since is when the tenant entered State.
	Since time.Time
	// Err is why the tenant last failed to start or stopped; "" when it
	// did not.
	Err string
	// Failures counts the starts that failed in a row.
	Failures int
	// NextTry is when a failing tenant is started again; zero otherwise.
	NextTry time.Time
	// Config is the running tenant's admin configuration: its Store,
	// Relay, Recorder and the settings of its types (the tokens, hosts
	// and limits are the serving Handler's). Nil when the tenant does not
	// run. The same pointer for as long as the same relay of the tenant
	// runs: a handler caches each tenant's counts per pointer.
	Config *Config
	// Hold, when set, keeps the tenant's relay and store from stopping
	// while a request uses Config: the handler calls it before serving
	// a route or counting the tenant, and calls release when done. ok
	// false: the relay is stopping (parked, removed, changed), and the
	// route answers 503 with Retry-After 1 instead of failing on a
	// closed store. Nil: the tenant's Config outlives every request.
	Hold func() (release func(), ok bool)
}

// Defaults of GET /api/v1/tenants.
const (
	// DefaultTenantPage is the tenants of a page when no limit is given;
	// MaxTenantPage the largest limit accepted. Each running tenant of a
	// page costs its counting queries (cached StatsTTL per tenant).
	DefaultTenantPage = 50
	MaxTenantPage     = 500
	// tenantCountParallel bounds the tenants counted at once.
	tenantCountParallel = 4
	// tenantCountTimeout bounds the counts of one tenant: a tenant whose
	// database hangs shows counts_error, and the page still answers.
	tenantCountTimeout = 5 * time.Second
)

// TenantView is one tenant in GET /api/v1/tenants.
type TenantView struct {
	Name  string    `json:"name"`
	State string    `json:"state"`
	Since time.Time `json:"since"`
	// Running reports whether the tenant's relay runs; its routes
	// answer 503 otherwise.
	Running  bool       `json:"running"`
	Error    string     `json:"error,omitempty"`
	Failures int        `json:"failures,omitempty"`
	NextTry  *time.Time `json:"next_try,omitempty"`
	// The counts, of a running tenant, summed over its event types, as
	// its overview shows them; absent when it does not run or its counts
	// failed (CountsError).
	Due                 *int64   `json:"due,omitempty"`
	Scheduled           *int64   `json:"scheduled,omitempty"`
	InProcess           *int64   `json:"in_process,omitempty"`
	Failed              *int64   `json:"failed,omitempty"`
	OldestDueAgeSeconds *float64 `json:"oldest_due_age_seconds,omitempty"`
	DeadLetters         *int64   `json:"dead_letters,omitempty"`
	CountsError         string   `json:"counts_error,omitempty"`
}

// TenantPage is a page of GET /api/v1/tenants, in name order.
type TenantPage struct {
	// Served reports whether the relay serves tenants. A relay without
	// tenants answers the route too, with Served false and no tenants,
	// so that a client (the dashboard) learns which API it talks to
	// without a failed request.
	Served  bool         `json:"served"`
	Tenants []TenantView `json:"tenants"`
	// NextCursor, when set, fetches the next page.
	NextCursor string `json:"next_cursor,omitempty"`
	// ListError is why the last listing of the tenants failed (the
	// supervisor keeps the tenants it had); absent when it succeeded.
	ListError string `json:"list_error,omitempty"`
}

// scopeCache holds the handlers of the running tenants, each with its
// counts' cache, by tenant name. It never holds more than maxScopes.
type scopeCache struct {
	mu sync.Mutex
	m  map[string]*Handler
}

// maxScopes bounds the tenant handlers cached; past it one is dropped
// (it costs its counts' cache only).
const maxScopes = 4096

// scope returns the handler of the running tenant st.
func (h *Handler) scope(st TenantStatus) *Handler {
	c := &h.scopes
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.m[st.Name]; s != nil && s.cfgPtr == st.Config {
		return s
	}
	if c.m == nil {
		c.m = map[string]*Handler{}
	}
	if len(c.m) >= maxScopes {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	cfg := *st.Config
	cfg.Tenants, cfg.Logger = nil, h.cfg.Logger
	cfg.StatsTTL, cfg.MaxBodyBytes, cfg.PreviewBytes = h.cfg.StatsTTL, h.cfg.MaxBodyBytes, h.cfg.PreviewBytes
	if cfg.Fingerprinter == nil {
		cfg.Fingerprinter = h.cfg.Fingerprinter
	}
	s := &Handler{cfg: cfg, cfgPtr: st.Config, tenant: st.Name, log: h.log.With(slog.String("tenant", st.Name))}
	c.m[st.Name] = s
	return s
}

// forget drops the cached handler of a tenant that does not run.
func (h *Handler) forget(name string) {
	h.scopes.mu.Lock()
	delete(h.scopes.m, name)
	h.scopes.mu.Unlock()
}

// tenantPrefix is the path of a tenant's routes, before each route's path.
const tenantPrefix = apiPrefix + "/tenants/{tenant}"

// tenantRoutesInit registers the routes of a relay with tenants: the
// tenants' listing, every API route under tenantPrefix, and every API
// route without a tenant answering 400.
func (h *Handler) tenantRoutesInit() {
	h.handle("GET "+apiPrefix+"/tenants", AccessRead, false, http.HandlerFunc(h.tenantList))
	for _, rt := range apiRoutes() {
		h.handle(rt.method+" "+tenantPrefix+rt.path, rt.access, false, h.tenantRoute(rt))
		h.handle(rt.method+" "+apiPrefix+rt.path, rt.access, false, http.HandlerFunc(h.tenantRequired))
	}
}

// noTenants serves GET /api/v1/tenants on a relay without tenants.
func (h *Handler) noTenants(w http.ResponseWriter, r *http.Request) {
	if _, _, err := parseTenantQuery(r.URL.Query()); err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, TenantPage{Tenants: []TenantView{}})
}

// tenantRequired answers a route without a tenant on a relay with tenants.
func (h *Handler) tenantRequired(w http.ResponseWriter, r *http.Request) {
	rest := r.URL.Path[len(apiPrefix):]
	writeProblem(w, r, http.StatusBadRequest, fmt.Sprintf(
		"this relay serves tenants: name one, %s/tenants/{tenant}%s; GET %s/tenants lists them", apiPrefix, rest, apiPrefix), nil)
}

// tenantRoute serves rt for the tenant the path names, with that
// tenant's handler.
func (h *Handler) tenantRoute(rt apiRoute) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("tenant")
		st, ok := h.cfg.Tenants.Tenant(name)
		if !ok {
			h.forget(name)
			writeProblem(w, r, http.StatusNotFound, fmt.Sprintf("no tenant %q; GET %s/tenants lists them", name, apiPrefix), nil)
			return
		}
		if st.Config == nil && st.State == "parked" {
			// Tenants.Tenant woke it: its relay starts in about a second.
			w.Header().Set("Retry-After", "1")
			writeProblem(w, r, http.StatusServiceUnavailable, fmt.Sprintf(
				"tenant %q was parked (idle) and is being woken; retry in a second", name), nil)
			return
		}
		if st.Config == nil {
			h.forget(name)
			w.Header().Set("Retry-After", "10")
			writeProblem(w, r, http.StatusServiceUnavailable, fmt.Sprintf(
				"tenant %q is not running (state %s); GET %s/tenants shows its state and error", name, st.State, apiPrefix), nil)
			return
		}
		release, ok := hold(st)
		if !ok {
			h.forget(name)
			w.Header().Set("Retry-After", "1")
			writeProblem(w, r, http.StatusServiceUnavailable, fmt.Sprintf(
				"tenant %q is stopping (parked, removed or changed); retry in a second", name), nil)
			return
		}
		defer release()
		rt.serve(h.scope(st)).ServeHTTP(w, r)
	})
}

// hold holds st's relay running for a request (TenantStatus.Hold).
func hold(st TenantStatus) (release func(), ok bool) {
	if st.Hold == nil {
		return func() {}, true
	}
	return st.Hold()
}

// tenantParams are the parameters GET /api/v1/tenants accepts.
var tenantParams = map[string]bool{"limit": true, "cursor": true}

// tenantCursorTag starts every tenants' cursor, so that another
// listing's cursor is refused, not misread.
const tenantCursorTag = 't'

// tenantList serves GET /api/v1/tenants?limit=&cursor=: the tenants in
// name order, keyset-paged on the name, each running one with its counts.
func (h *Handler) tenantList(w http.ResponseWriter, r *http.Request) {
	limit, after, err := parseTenantQuery(r.URL.Query())
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	list, listErr := h.cfg.Tenants.List(after, limit+1)
	page := TenantPage{Served: true, Tenants: make([]TenantView, 0, min(len(list), limit)), ListError: listErr}
	if len(list) > limit {
		list = list[:limit]
		page.NextCursor = encodeTenantCursor(list[limit-1].Name)
	}
	for _, st := range list {
		page.Tenants = append(page.Tenants, tenantView(st))
	}
	h.countTenants(r.Context(), list, page.Tenants)
	writeJSON(w, http.StatusOK, page)
}

// parseTenantQuery parses the query of GET /api/v1/tenants; bad values
// are 400s naming the parameter.
func parseTenantQuery(q url.Values) (limit int, after string, err error) {
	var errs paramErrors
	checkParams(q, tenantParams, &errs)
	limit = limitParam(q, DefaultTenantPage, MaxTenantPage, &errs)
	after, cerr := decodeTenantCursor(q.Get("cursor"))
	if cerr != nil {
		errs.add("cursor", "not a cursor returned by this API")
	}
	return limit, after, errs.err()
}

func tenantView(st TenantStatus) TenantView {
	v := TenantView{Name: st.Name, State: st.State, Since: st.Since, Running: st.Config != nil, Error: st.Err, Failures: st.Failures}
	if !st.NextTry.IsZero() {
		t := st.NextTry
		v.NextTry = &t
	}
	return v
}

// countTenants fills in the counts of the running tenants of list,
// tenantCountParallel at a time.
func (h *Handler) countTenants(ctx context.Context, list []TenantStatus, views []TenantView) {
	sem := make(chan struct{}, tenantCountParallel)
	var wg sync.WaitGroup
	for i, st := range list {
		if st.Config == nil {
			h.forget(st.Name)
			continue
		}
		release, ok := hold(st)
		if !ok {
			views[i].CountsError = "the tenant is stopping"
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { release(); <-sem; wg.Done() }()
			h.scope(st).tenantCounts(ctx, &views[i])
		}()
	}
	wg.Wait()
}

// tenantCounts sets v's counts from the tenant's cached stats.
func (h *Handler) tenantCounts(ctx context.Context, v *TenantView) {
	ctx, cancel := context.WithTimeout(ctx, tenantCountTimeout)
	defer cancel()
	details, unresolved, _, err := h.cachedStats(ctx)
	if err != nil {
		v.CountsError = "the counts failed; the relay's log has the reason"
		if errors.Is(err, context.DeadlineExceeded) {
			v.CountsError = "the counts took longer than " + tenantCountTimeout.String()
		}
		h.log.Warn("admin: a tenant's counts failed", slog.Any("error", err))
		return
	}
	var due, sched, inProc, failed int64
	var oldest float64
	for _, d := range details {
		due, sched, inProc, failed = due+d.Due, sched+d.Scheduled, inProc+d.InProcess, failed+d.Failed
		oldest = max(oldest, seconds(d.OldestDueAge))
	}
	v.Due, v.Scheduled, v.InProcess, v.Failed, v.OldestDueAgeSeconds, v.DeadLetters = &due, &sched, &inProc, &failed, &oldest, &unresolved
}

func encodeTenantCursor(name string) string {
	return base64.RawURLEncoding.EncodeToString(append([]byte{tenantCursorTag}, name...))
}

// decodeTenantCursor returns the name a cursor continues after; "" for
// no cursor.
func decodeTenantCursor(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return "", err
	}
	if len(b) < 2 || b[0] != tenantCursorTag {
		return "", errors.New("not a tenants cursor")
	}
	return string(b[1:]), nil
}
