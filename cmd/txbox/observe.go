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
		opts := relayprom.Options{StatsInterval: cfg.Metrics.StatsInterval}
		if in, ok := st.Driver.(store.Inspector); ok {
			opts.Stats = in
		}
		o.metrics = relayprom.New(opts)
		reg := prometheus.NewRegistry()
		reg.MustRegister(o.metrics, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		mh := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)})
		o.onAdmin[cfg.Metrics.Path] = mh
		if cfg.Metrics.Listen != "" {
			o.muxes[cfg.Metrics.Listen].Handle(cfg.Metrics.Path, mh)
		}
	}
	return o, nil
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
	if addr := o.cfg.Health.Listen; addr != "" || o.cfg.Admin.Enabled {
		sv, ok := o.st.Driver.(store.SchemaVersioner)
		if !ok {
			return fmt.Errorf("health: the %s store cannot report its schema version", o.st.Dialect())
		}
		hc := health.Config{Store: sv, Relay: r, LagThreshold: o.cfg.Health.LagThreshold, FailWhenDegraded: o.cfg.Health.FailWhenDegraded,
			RejectThreshold: o.cfg.Health.RejectThreshold}
		if in, ok := o.st.Driver.(store.Inspector); ok {
			hc.Stats = in
		}
		if fi, ok := o.st.Driver.(store.HorizonInspector); ok && o.cfg.HasCommitHorizon() {
			hc.Horizon, hc.HorizonThreshold = fi, o.cfg.HealthHorizonThreshold()
		}
		c, err := health.New(hc)
		if err != nil {
			return err
		}
		o.onAdmin["/livez"], o.onAdmin["/readyz"] = c.LivezHandler(), c.ReadyzHandler()
		if addr != "" {
			o.muxes[addr].Handle("/livez", c.LivezHandler())
			o.muxes[addr].Handle("/readyz", c.ReadyzHandler())
		}
	}
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
	return nil
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
