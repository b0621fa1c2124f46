package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/admin"
	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/relay"
)

// adminShutdownTimeout bounds the admin server's graceful stop.
const adminShutdownTimeout = 5 * time.Second

// startAdmin starts the admin server when admin.enabled is set and returns
// the function that stops it (a no-op when it is off). extra (the metrics
// and the probes) is mounted behind the same tokens and checks.
func startAdmin(e *env, cfg *config.Config, st *config.Store, r *relay.Relay, rec *admin.Recorder, extra map[string]http.Handler, log *slog.Logger) (func(), error) {
	if !cfg.Admin.Enabled {
		return func() {}, nil
	}
	return serveAdmin(e, cfg, relayAdminConfig(cfg, st, r, rec), extra, log)
}

// relayAdminConfig is the admin configuration of relay r over st, with
// the settings of cfg's types; the tokens, hosts and logger are
// serveAdmin's.
func relayAdminConfig(cfg *config.Config, st *config.Store, r *relay.Relay, rec *admin.Recorder) admin.Config {
	return admin.Config{
		Store: st.Driver, Relay: r, Recorder: rec,
		Ordered: func(t string) bool {
			o := cfg.Effective(t).Ordering
			return o != nil && *o == txbox.OrderingKey
		},
		NoCommitHorizon: !cfg.HasCommitHorizon(),
		Fingerprinter:   cfg.Fingerprinter(),
		Retention:       typeRetention(cfg),
		Routes:          adminRoutes(cfg),
	}
}

// serveAdmin starts the admin server of ac, with the tokens and hosts of
// cfg, and returns the function that stops it.
func serveAdmin(e *env, cfg *config.Config, ac admin.Config, extra map[string]http.Handler, log *slog.Logger) (func(), error) {
	read, adminTok, err := cfg.AdminTokens(e.getenv)
	if err != nil {
		return nil, &usageError{err.Error()}
	}
	hosts := cfg.Admin.AllowedHosts
	if len(hosts) == 0 {
		hosts = append([]string(nil), admin.DefaultAllowedHosts...)
		// A specific listen address is a name clients use too.
		if host, _, err := net.SplitHostPort(cfg.Admin.Listen); err == nil && host != "" {
			if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
				hosts = append(hosts, host)
			}
		}
	}
	ac.ReadToken, ac.AdminToken, ac.AllowedHosts, ac.Logger = read, adminTok, hosts, log
	h, err := admin.New(ac)
	if err != nil {
		return nil, err
	}
	for pattern, handler := range extra {
		h.Handle(pattern, handler)
	}
	ln, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		return nil, fmt.Errorf("admin.listen: %w", err)
	}
	srv := admin.NewServer(cfg.Admin.Listen, h, log)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server stopped", slog.Any("error", err))
		}
	}()
	log.Info("admin server listening", slog.String("addr", ln.Addr().String()), slog.Any("allowed_hosts", hosts),
		slog.Bool("read_token", read != ""), slog.Bool("admin_token", adminTok != ""), slog.Bool("tenants", ac.Tenants != nil))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), adminShutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// adminRoutes returns the routes of each fanned-out type as the admin
// overview shows them (config.Config.Routes).
func adminRoutes(cfg *config.Config) func(string) []admin.RouteView {
	return func(t string) []admin.RouteView {
		var out []admin.RouteView
		for _, r := range cfg.Routes(t) {
			out = append(out, admin.RouteView{Name: r.Name, Sender: r.Sender, Destination: r.Destination,
				Claim: string(r.Claim), BatchSize: r.BatchSize, MaxAttempts: r.MaxAttempts, Ordering: string(r.Ordering)})
		}
		return out
	}
}
