package admin

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/store"
)

// Defaults of Config.
const (
	// DefaultStatsTTL is how long the backlog and dead-letter counts are
	// cached: every dashboard polls, but the database counts at most once
	// per TTL.
	DefaultStatsTTL = 2 * time.Second
	// DefaultMaxBodyBytes bounds a request body (a bulk action with ten
	// thousand ids fits).
	DefaultMaxBodyBytes = 1 << 20
	// DefaultPreviewBytes is how much of a payload a dead letter shows
	// unless the full body is asked for.
	DefaultPreviewBytes = 1024
	// MaxBulk is the most dead letters one bulk action changes; a filter
	// matching more reports more=true and the client repeats.
	MaxBulk = 10_000
)

// HealthSource is what the handler reads of a running relay; *relay.Relay
// implements it.
type HealthSource interface {
	Health() relay.Health
}

// Config configures a Handler. Store (or Tenants) and at least one
// token are required.
type Config struct {
	// Store is the database the relay uses. Per-type details, parked
	// keys and instances need a store implementing store.Inspector and
	// store.Instances (every txbox dialect does).
	Store store.Driver
	// Tenants, instead of Store, serves a relay with tenants
	// (docs/multi-tenant.md): every API route moves under
	// /api/v1/tenants/{tenant}/ and serves that tenant's store, and
	// GET /api/v1/tenants lists the tenants (tenants.go). The fields
	// below that describe one relay (Relay, Recorder, Ordered,
	// NoCommitHorizon, Fingerprinter, Retention, Routes) are each
	// tenant's own, in its TenantStatus.Config, and ignored here.
	Tenants Tenants
	// Relay, when set, adds the relay's polling delays, circuits and job
	// errors. Nil for a handler mounted in a service that does not run
	// the relay.
	Relay HealthSource
	// Recorder, when set and added to the relay's hooks, adds per-type
	// sent, retried and failed counters (the dashboard's throughput).
	Recorder *Recorder
	// ReadToken may read everything; AdminToken may also retry, resolve
	// and delete. At least one is required; each must have at least
	// MinTokenLength bytes, and they must differ. Load them from the
	// environment or a file, never from a configuration file.
	ReadToken, AdminToken string
	// AllowedHosts are the Host header values (without port) accepted.
	// Defaults to DefaultAllowedHosts; add the name clients use when the
	// handler listens elsewhere than on loopback.
	AllowedHosts []string
	// Ordered reports whether an event type is delivered in order per
	// key: only those types' keys are listed as parked. Nil lists the
	// keys of every type.
	Ordered func(eventType string) bool
	// NoCommitHorizon leaves the commit horizon out of the overview: set
	// it when no event type waits for the horizon (none has Ordering key
	// with the horizon on), as txbox relay does from its configuration.
	// The holder is the cluster's oldest transaction, of any database, so
	// without an ordered type reporting it would only alarm. Defaults to
	// false: the horizon is reported whenever the store has one
	// (store.HorizonInspector).
	NoCommitHorizon bool
	// Fingerprinter fingerprints the dead letters a groups listing finds
	// without a fingerprint (those stored before fingerprints were, or
	// not reached yet by the relay's dead_letter_fingerprint job). Set it
	// to the relay's (relay.Relay.Fingerprinter), as txbox relay does, so
	// that both group a dead letter alike. Defaults to
	// store.BasicFingerprinter, which knows no destination.
	Fingerprinter store.Fingerprinter
	// Retention, when set, returns an event type's retention (how long
	// the relay keeps its delivered rows, the type's effective retention
	// setting) and whether the relay's configuration knows the type.
	// POST /api/v1/redrive refuses a type it does not know, and one whose
	// retention is 0 (its rows are deleted on delivery: nothing is kept
	// to send again), with a 422 naming "type". Nil accepts every valid
	// type name and leaves it to the store to find the kept rows, for a
	// handler mounted where the relay's configuration is not known.
	Retention func(eventType string) (retention time.Duration, known bool)
	// Routes, when set, returns the routes of a fanned-out event type
	// (docs/concepts.md, "Fan-out") with their settings, nil for a type
	// with one route; the overview shows them, with each route's poller
	// when the relay runs in this process (its health names the routes
	// in any case). txbox relay sets it from its configuration.
	Routes func(eventType string) []RouteView
	// Logger receives the audit lines and request failures; tokens and
	// payloads are never logged. Defaults to slog.Default().
	Logger *slog.Logger
	// StatsTTL defaults to DefaultStatsTTL.
	StatsTTL time.Duration
	// MaxBodyBytes defaults to DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// PreviewBytes defaults to DefaultPreviewBytes.
	PreviewBytes int
}

// ErrInvalidConfig is returned by New for a Config it cannot use.
var ErrInvalidConfig = errors.New("admin: invalid configuration")

// Route is one registered route.
type Route struct {
	// Method is the HTTP method ("GET", "POST").
	Method string
	// Path is the pattern's path, with {wildcards} as registered.
	Path string
	// Access is what the route requires of the caller's token.
	Access Access
}

// Handler serves the admin API and dashboard. Create it with New.
type Handler struct {
	cfg        Config
	log        *slog.Logger
	mux        *http.ServeMux
	cop        *http.CrossOriginProtection
	principals []*principal
	hosts      map[string]bool

	mu     sync.Mutex
	routes []Route
	access map[string]route

	stats statsCache

	// tenant is the tenant a handler of one tenant serves ("" for
	// others); scopes caches those handlers in a handler serving tenants.
	tenant string
	scopes scopeCache
	// cfgPtr is the TenantStatus.Config a tenant's handler was made of.
	cfgPtr *Config
}

type route struct {
	Route
	login bool
}

//go:embed static
var staticFS embed.FS

// New checks cfg and returns the handler.
func New(cfg Config) (*Handler, error) {
	switch {
	case cfg.Store == nil && cfg.Tenants == nil:
		return nil, fmt.Errorf("%w: Store (or Tenants) is required", ErrInvalidConfig)
	case cfg.Store != nil && cfg.Tenants != nil:
		return nil, fmt.Errorf("%w: Store and Tenants exclude each other", ErrInvalidConfig)
	}
	if cfg.ReadToken == "" && cfg.AdminToken == "" {
		return nil, fmt.Errorf("%w: a read token or an admin token is required", ErrInvalidConfig)
	}
	for name, tok := range map[string]string{"read token": cfg.ReadToken, "admin token": cfg.AdminToken} {
		if tok != "" && len(tok) < MinTokenLength {
			return nil, fmt.Errorf("%w: the %s must have at least %d bytes", ErrInvalidConfig, name, MinTokenLength)
		}
		if strings.ContainsAny(tok, " \t\r\n") {
			return nil, fmt.Errorf("%w: the %s must not contain white space", ErrInvalidConfig, name)
		}
	}
	if cfg.ReadToken != "" && cfg.ReadToken == cfg.AdminToken {
		return nil, fmt.Errorf("%w: the read token and the admin token must differ", ErrInvalidConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StatsTTL <= 0 {
		cfg.StatsTTL = DefaultStatsTTL
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.PreviewBytes <= 0 {
		cfg.PreviewBytes = DefaultPreviewBytes
	}
	if cfg.Fingerprinter == nil {
		cfg.Fingerprinter = store.BasicFingerprinter
	}
	h := &Handler{
		cfg:    cfg,
		log:    cfg.Logger.With(slog.String("component", "txbox.admin")),
		mux:    http.NewServeMux(),
		cop:    http.NewCrossOriginProtection(),
		hosts:  map[string]bool{},
		access: map[string]route{},
	}
	for _, p := range []*principal{newPrincipal(whoRead, AccessRead, cfg.ReadToken), newPrincipal(whoAdmin, AccessAdmin, cfg.AdminToken)} {
		if p != nil {
			h.principals = append(h.principals, p)
		}
	}
	hosts := cfg.AllowedHosts
	if len(hosts) == 0 {
		hosts = DefaultAllowedHosts
	}
	for _, host := range hosts {
		h.hosts[strings.ToLower(strings.Trim(host, "[]"))] = true
	}
	h.routesInit()
	return h, nil
}

func (h *Handler) routesInit() {
	h.handle("GET /{$}", AccessRead, false, http.HandlerFunc(h.index))
	h.handle("GET /assets/{file}", AccessRead, false, http.HandlerFunc(h.asset))
	h.handle("POST /login", AccessRead, true, http.HandlerFunc(h.login))
	h.handle("POST /logout", AccessRead, false, http.HandlerFunc(h.logout))
	if h.cfg.Tenants != nil {
		h.tenantRoutesInit()
		return
	}
	for _, rt := range apiRoutes() {
		h.handle(rt.method+" "+apiPrefix+rt.path, rt.access, false, rt.serve(h))
	}
	h.handle("GET "+apiPrefix+"/tenants", AccessRead, false, http.HandlerFunc(h.noTenants))
}

// apiPrefix starts every API path; a relay with tenants serves them under
// apiPrefix + "/tenants/{tenant}" (tenants.go).
const apiPrefix = "/api/v1"

// apiRoute is one route of the API, served by a Handler of one store:
// serve binds it to that handler.
type apiRoute struct {
	method, path string
	access       Access
	serve        func(*Handler) http.Handler
}

// apiRoutes are the API's routes, paths after apiPrefix.
func apiRoutes() []apiRoute {
	fn := func(m func(*Handler, http.ResponseWriter, *http.Request)) func(*Handler) http.Handler {
		return func(h *Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m(h, w, r) })
		}
	}
	out := []apiRoute{
		{"GET", "/overview", AccessRead, fn((*Handler).overview)},
		{"GET", "/types", AccessRead, fn((*Handler).types)},
		{"GET", "/instances", AccessRead, fn((*Handler).instances)},
		{"GET", "/parked-keys", AccessRead, fn((*Handler).parkedKeys)},
		{"GET", "/dead-letters", AccessRead, fn((*Handler).deadLetterList)},
		{"GET", "/dead-letters/count", AccessRead, fn((*Handler).deadLetterCount)},
		{"GET", "/dead-letters/groups", AccessRead, fn((*Handler).deadLetterGroups)},
		{"GET", "/dead-letters/{id}", AccessRead, fn((*Handler).deadLetterGet)},
		{"GET", "/dead-letters/{id}/payload", AccessRead, fn((*Handler).deadLetterPayload)},
		{"GET", "/audit", AccessRead, fn((*Handler).auditList)},
	}
	for _, a := range actions {
		out = append(out,
			apiRoute{"POST", "/dead-letters/" + a.name, AccessAdmin, func(h *Handler) http.Handler { return h.bulk(a) }},
			apiRoute{"POST", "/dead-letters/{id}/" + a.name, AccessAdmin, func(h *Handler) http.Handler { return h.single(a) }})
	}
	return append(out, apiRoute{"POST", "/redrive", AccessAdmin, fn((*Handler).redrive)})
}

func (h *Handler) handle(pattern string, access Access, login bool, hd http.Handler) {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		method, path = "", pattern
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mux.Handle(pattern, hd)
	rt := route{Route: Route{Method: method, Path: path, Access: access}, login: login}
	h.routes = append(h.routes, rt.Route)
	h.access[pattern] = rt
}

// Handle mounts another handler (metrics, health probes) at pattern, an
// http.ServeMux pattern such as "GET /metrics", behind the same checks as
// the API's own read routes: allowed Host, a valid token. A pattern
// without a method gets "GET ". It panics, as http.ServeMux does, when the
// pattern conflicts with a registered one.
func (h *Handler) Handle(pattern string, handler http.Handler) {
	if !strings.Contains(pattern, " ") {
		pattern = http.MethodGet + " " + pattern
	}
	h.handle(pattern, AccessRead, false, handler)
}

// Routes returns every registered route, in registration order: the
// API's own and those added with Handle.
func (h *Handler) Routes() []Route {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Route(nil), h.routes...)
}

type ctxKey struct{}

// ServeHTTP applies the checks every route has, in this order: allowed
// Host (403), cross-origin protection for unsafe methods (403), a valid
// token (401), the route's access (403); then it serves the route with a
// size-limited body.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w)
	if !h.hostAllowed(r) {
		writeProblem(w, r, http.StatusForbidden, "host not allowed (admin.allowed-hosts)", nil)
		return
	}
	if err := h.cop.Check(r); err != nil {
		writeProblem(w, r, http.StatusForbidden, "cross-origin request refused", nil)
		return
	}
	_, pattern := h.mux.Handler(r)
	h.mu.Lock()
	rt, known := h.access[pattern]
	h.mu.Unlock()
	r.Body = http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes)
	if known && rt.login {
		h.mux.ServeHTTP(w, r)
		return
	}
	p := h.authenticate(r)
	switch {
	case p == nil:
		h.unauthorized(w, r)
		return
	case !known:
		h.notFound(w, r)
		return
	case rt.Access == AccessAdmin && p.access != AccessAdmin:
		writeProblem(w, r, http.StatusForbidden, "this route needs the admin token", nil)
		return
	}
	h.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, p)))
}

// who names the caller's token for audit lines.
func who(r *http.Request) string {
	if p, ok := r.Context().Value(ctxKey{}).(*principal); ok {
		return p.who
	}
	return "unknown"
}

// unauthorized answers 401: with the login page for a browser asking for
// HTML, with a problem otherwise.
func (h *Handler) unauthorized(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="txbox admin"`)
	if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
		page, err := staticFS.ReadFile("static/login.html")
		if err == nil {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write(page)
			return
		}
	}
	writeProblem(w, r, http.StatusUnauthorized, "a bearer token (read or admin) is required", nil)
}

// notFound answers an authenticated request no route matched: 405 with
// Allow when the path exists for another method, 404 otherwise.
func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, p := h.mux.Handler(probe); p != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeProblem(w, r, http.StatusMethodNotAllowed, "method not allowed", nil)
		return
	}
	writeProblem(w, r, http.StatusNotFound, "no such route", nil)
}

func (h *Handler) index(w http.ResponseWriter, r *http.Request) {
	h.serveStatic(w, r, "index.html")
}

func (h *Handler) asset(w http.ResponseWriter, r *http.Request) {
	h.serveStatic(w, r, r.PathValue("file"))
}

var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
}

func (h *Handler) serveStatic(w http.ResponseWriter, r *http.Request, name string) {
	dot := strings.LastIndexByte(name, '.')
	if strings.ContainsAny(name, "/\\") || name == "login.html" || dot < 0 || contentTypes[name[dot:]] == "" {
		writeProblem(w, r, http.StatusNotFound, "no such file", nil)
		return
	}
	b, err := fs.ReadFile(staticFS, "static/"+name)
	if err != nil {
		writeProblem(w, r, http.StatusNotFound, "no such file", nil)
		return
	}
	w.Header().Set("Content-Type", contentTypes[name[dot:]])
	_, _ = w.Write(b)
}

// login checks the token of the dashboard's login form and sets the
// session cookie. It is the one route that reads its token from the
// body; a wrong or missing one is a 401 like on every other route.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		h.writeError(w, r, err)
		return
	}
	tok := strings.TrimSpace(r.PostForm.Get("token"))
	var p *principal
	if tok != "" {
		p = h.match([]byte(tok), nil)
	}
	if p == nil {
		h.log.Warn("admin login refused", slog.String("remote_addr", r.RemoteAddr))
		w.Header().Set("WWW-Authenticate", `Bearer realm="txbox admin"`)
		writeProblem(w, r, http.StatusUnauthorized, "wrong token", nil)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: string(p.session), Path: "/",
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	h.log.Info("admin login", slog.String("who", p.who), slog.String("remote_addr", r.RemoteAddr))
	http.Redirect(w, r, "./", http.StatusSeeOther)
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "./", http.StatusSeeOther)
}
