package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/health"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/relayprom"
	"github.com/txbox/txbox/store"
)

// observability is what `txbox relay` serves besides relaying: metrics on
// metrics.listen and the probes on health.listen (one listener when they
// are the same address). Both are off unless configured.
type observability struct {
	cfg     *config.Config
	st      *config.Store
	log     *slog.Logger
	metrics *relayprom.Metrics
	// reg is the metrics registry, when metrics are served: a relay
	// serving tenants registers each tenant's metrics in it, labelled
	// with the tenant (tenantRelay).
	reg *prometheus.Registry
	// muxes maps each address to its handler; listeners are opened
	// before the relay starts, so a taken port fails the command at once.
	muxes   map[string]*http.ServeMux
	lns     map[string]net.Listener
	servers []*http.Server
	done    chan struct{}
	// onAdmin are the handlers the admin server mounts behind its tokens
	// when admin.enabled: the metrics and the probes, also when they have
	// no listener of their own.
	onAdmin map[string]http.Handler
}

// readHeaderTimeout bounds a client that opens a connection and sends
// nothing: probes and scrapes send their few headers at once.
const readHeaderTimeout = 5 * time.Second

// listenObservability opens the configured listeners and builds the
// metrics hook; the relay must get o.hooks().
func listenObservability(cfg *config.Config, st *config.Store, log *slog.Logger) (*observability, error) {
	o := &observability{cfg: cfg, st: st, log: log, muxes: map[string]*http.ServeMux{}, lns: map[string]net.Listener{},
		done: make(chan struct{}), onAdmin: map[string]http.Handler{}}
	for _, addr := range []string{cfg.Metrics.Listen, cfg.Health.Listen} {
		if addr == "" || o.lns[addr] != nil {
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			o.closeListeners()
			return nil, fmt.Errorf("listen: %w", err)
		}
		o.lns[addr], o.muxes[addr] = ln, http.NewServeMux()
	}
	if cfg.Metrics.Listen != "" || cfg.Admin.Enabled {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		o.reg = reg
		if st != nil { // nil: tenants, each with metrics of its own
			o.metrics = relayprom.New(metricsOptions(cfg, st))
			reg.MustRegister(o.metrics)
		}
		mh := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)})
		o.onAdmin[cfg.Metrics.Path] = mh
		if cfg.Metrics.Listen != "" {
			o.muxes[cfg.Metrics.Listen].Handle(cfg.Metrics.Path, mh)
		}
	}
	return o, nil
}

// metricsOptions are the relay metrics' options for the store st.
func metricsOptions(cfg *config.Config, st *config.Store) relayprom.Options {
	opts := relayprom.Options{StatsInterval: cfg.Metrics.StatsInterval}
	if in, ok := st.Driver.(store.Inspector); ok {
		opts.Stats = in
	}
	return opts
}

// hooks returns the relay hooks: the metrics, when served.
func (o *observability) hooks() []txbox.RelayHook {
	if o.metrics == nil {
		return nil
	}
	return []txbox.RelayHook{o.metrics}
}

// serve mounts the probes of r and starts serving.
func (o *observability) serve(r *relay.Relay) error {
	if o.metrics != nil {
		o.metrics.WatchRelay(r)
	}
	if o.cfg.Health.Listen != "" || o.cfg.Admin.Enabled {
		c, err := newChecker(o.cfg, o.st, r)
		if err != nil {
			return err
		}
		o.mountProbes(c.LivezHandler(), c.ReadyzHandler())
	}
	o.startServers()
	return nil
}

// newChecker makes the probes' checker of relay r over store st.
func newChecker(cfg *config.Config, st *config.Store, r *relay.Relay) (*health.Checker, error) {
	sv, ok := st.Driver.(store.SchemaVersioner)
	if !ok {
		return nil, fmt.Errorf("health: the %s store cannot report its schema version", st.Dialect())
	}
	hc := health.Config{Store: sv, Relay: r, LagThreshold: cfg.Health.LagThreshold, FailWhenDegraded: cfg.Health.FailWhenDegraded,
		RejectThreshold: cfg.Health.RejectThreshold}
	if in, ok := st.Driver.(store.Inspector); ok {
		hc.Stats = in
	}
	if fi, ok := st.Driver.(store.HorizonInspector); ok && cfg.HasCommitHorizon() {
		hc.Horizon, hc.HorizonThreshold = fi, cfg.HealthHorizonThreshold()
	}
	return health.New(hc)
}

// mountProbes serves livez and readyz on health.listen and for the admin
// server.
func (o *observability) mountProbes(livez, readyz http.Handler) {
	o.onAdmin["/livez"], o.onAdmin["/readyz"] = livez, readyz
	if addr := o.cfg.Health.Listen; addr != "" {
		o.muxes[addr].Handle("/livez", livez)
		o.muxes[addr].Handle("/readyz", readyz)
	}
}

// startServers serves every listener.
func (o *observability) startServers() {
	for addr, ln := range o.lns {
		srv := &http.Server{Handler: o.muxes[addr], ReadHeaderTimeout: readHeaderTimeout,
			ErrorLog: slog.NewLogLogger(o.log.Handler(), slog.LevelWarn)}
		o.servers = append(o.servers, srv)
		var what []string
		if addr == o.cfg.Metrics.Listen {
			what = append(what, o.cfg.Metrics.Path)
		}
		if addr == o.cfg.Health.Listen {
			what = append(what, "/livez", "/readyz")
		}
		o.log.Info("serving", "addr", ln.Addr().String(), "paths", what)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				o.log.Error("http server stopped", "addr", ln.Addr().String(), "error", err)
			}
		}()
	}
}

// close stops the servers, after the relay stopped: until then /readyz
// reports the stop (503) instead of refusing connections.
func (o *observability) close(ctx context.Context) {
	for _, srv := range o.servers {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	if len(o.servers) == 0 {
		o.closeListeners()
	}
}

func (o *observability) closeListeners() {
	for _, ln := range o.lns {
		_ = ln.Close()
	}
}
