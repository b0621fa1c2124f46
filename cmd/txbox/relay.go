package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/txbox/txbox/admin"
	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/internal/cpuprofile"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func runRelay(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "relay", "relay [--config txbox.yaml] [--migrate] [--cpuprofile FILE] [--set key=value]...")
	var cf configFlags
	cf.register(fs, e)
	migrate := fs.Bool("migrate", false, "apply migrations before starting")
	profile := fs.String("cpuprofile", "", "diagnostic: write a CPU profile (runtime/pprof) of the whole run to `FILE`, "+
		"completed on shutdown; read it with go tool pprof (docs/operations.md, \"Profile the relay\")")
	if err := parse(fs, args); err != nil {
		return err
	}
	setRelayGC()
	hup, stopHup := notifyHangup()
	defer stopHup()
	stopProfile, err := cpuprofile.Start(*profile)
	if err != nil {
		return err
	}
	// Deferred first so that it runs last: the profile covers the
	// graceful stop and the closing of the senders and the store.
	defer func() {
		if err := stopProfile(); err != nil {
			fmt.Fprintf(e.stderr, "txbox relay: %v\n", err)
		}
	}()
	cfg, err := cf.load(e)
	if err != nil {
		return err
	}
	if err := checkRelayConfig(&cf, cfg); err != nil {
		return err
	}
	log := cfg.NewLogger(e.stderr)
	// Deferred before everything the relay opens: the last spans are
	// flushed after the relay stopped (docs/operations.md, "Tracing").
	tp, stopTracing, err := startTracing(ctx, cfg, e.getenv, log)
	if err != nil {
		return err
	}
	defer stopTracing(ctx)
	if cfg.HasTenants() {
		return runTenantRelays(ctx, e, &cf, cfg, log, tp, *migrate, hup)
	}
	st, err := openRelayStore(ctx, cfg, e, log, *migrate)
	if err != nil {
		return err
	}
	defer st.Close()
	senders, err := cfg.OpenSenders(ctx, e.getenv, log)
	if err != nil {
		return err
	}
	defer closeSenders(ctx, senders, log)
	obs, err := listenObservability(cfg, st, log)
	if err != nil {
		return err
	}
	defer obs.close(context.WithoutCancel(ctx))
	rec := &admin.Recorder{}
	r, err := newRelay(cfg, st, senders, log, obs, tp, rec)
	if err != nil {
		return err
	}
	if err := obs.serve(r); err != nil {
		return err
	}
	if err := r.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	stopAdmin, err := startAdmin(e, cfg, st, r, rec, obs.onAdmin, log)
	if err != nil {
		_ = stopRelay(ctx, e, r, cfg.Relay.ShutdownTimeout, log)
		return err
	}
	log.Info("relay started", "dialect", st.Dialect(), "event_types", cfg.EventTypes(), "senders", sortedKeys(senders))
	waitIgnoringHangup(ctx, hup, log)
	defer stopAdmin()
	return stopRelay(ctx, e, r, cfg.Relay.ShutdownTimeout, log)
}

// notifyHangup makes SIGHUP the relay's (a relay with tenants lists them
// again, one without logs it), not Go's default, which exits at once. The
// relay registers it before it logs "relay started", which a supervisor
// may take as the time to send one.
func notifyHangup() (<-chan os.Signal, func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup, func() { signal.Stop(hup) }
}

// waitIgnoringHangup waits for ctx to end. A SIGHUP (on hup) meanwhile
// is logged and otherwise ignored: a relay without tenants has nothing
// to re-read (a relay with tenants lists them again), and Go's default
// for SIGHUP, exiting at once, would leave its claimed rows to their
// leases.
func waitIgnoringHangup(ctx context.Context, hup <-chan os.Signal, log *slog.Logger) {
	for {
		select {
		case <-hup:
			log.Info("SIGHUP: this relay serves no tenants and re-reads nothing; restart it to apply a changed configuration")
		case <-ctx.Done():
			return
		}
	}
}

// checkRelayConfig refuses a configuration the relay cannot run: no
// sender, or no database named.
func checkRelayConfig(cf *configFlags, cfg *config.Config) error {
	if len(cfg.Senders) == 0 {
		if cf.file == "" {
			return usagef("no configuration file found (%s), and no --set senders.NAME.type=… names a sender; "+
				"give one with --config FILE or TXBOX_CONFIG=FILE, with a sender under senders (docs/configuration.md, docs/quickstart.md)", lookedAt())
		}
		return usagef("the configuration file %s names no sender: add one under senders (see docs/configuration.md)", cf.file)
	}
	return cf.requireNamed("")
}

// newRelay makes the relay of cfg, with the observability hooks, the
// tracer provider (nil: tracing off) and, when the admin API is on, rec.
func newRelay(cfg *config.Config, st *config.Store, senders map[string]sender.Sender, log *slog.Logger,
	obs *observability, tp *sdktrace.TracerProvider, rec *admin.Recorder) (*relay.Relay, error) {
	rc := cfg.RelayConfig(st, senders, log)
	rc.Hooks = append(rc.Hooks, obs.hooks()...)
	if tp != nil {
		rc.TracerProvider = tp
	}
	if cfg.Admin.Enabled {
		rc.Hooks = append(rc.Hooks, rec)
	}
	r, err := relay.New(rc)
	if err != nil && errors.Is(err, relay.ErrInvalidConfig) {
		return nil, &usageError{config.RelayError(err).Error()}
	}
	return r, err
}

// openRelayStore opens the configured store, pings it and, when migrate
// is set, applies the migrations. It fails fast on a wrong DSN or an
// unreachable database instead of starting a relay that can only log
// errors.
func openRelayStore(ctx context.Context, cfg *config.Config, e *env, log *slog.Logger, migrate bool) (*config.Store, error) {
	st, err := cfg.OpenStore(ctx, e.getenv, log)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	err = st.Ping(pctx)
	cancel()
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("database %s: %w", cfg.Database.Dialect, err)
	}
	if migrate {
		if err := st.Migrate(ctx); err != nil {
			st.Close()
			return nil, fmt.Errorf("migrate: %w", err)
		}
	}
	return st, nil
}

// closeSenders closes every sender, within 10s of the relay's stop.
func closeSenders(ctx context.Context, senders map[string]sender.Sender, log *slog.Logger) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, name := range sortedKeys(senders) {
		if err := senders[name].Close(cctx); err != nil {
			log.Warn("close sender", "sender", name, "error", err)
		}
	}
}

// relayGCPercent is the relay's GOGC when the environment sets none. A
// draining relay allocates per message (rows, headers, broker messages)
// but keeps little alive, a few batches: at Go's default of 100 the
// collector ran so often that it was a quarter of the relay's CPU per
// event. At 400 it runs a quarter as often for some 15-25 MiB more peak
// RSS (docs/operations.md, "Memory and GC").
const relayGCPercent = 400

// setRelayGC applies relayGCPercent unless GOGC is set: an operator's
// GOGC (or GOMEMLIMIT, which bounds the heap whatever GOGC says) wins.
func setRelayGC() {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(relayGCPercent)
	}
}

// stopRelay stops r gracefully within timeout; a second signal (e.hurry)
// shortens what is left to hurryGrace.
func stopRelay(ctx context.Context, e *env, r *relay.Relay, timeout time.Duration, log *slog.Logger) error {
	log.Info("relay stopping", "deadline", timeout.String())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	// A second signal shortens the grace period: after hurryGrace the
	// sends still in flight are cancelled and their rows released (Stop's
	// deadline), so they do not wait out their lease.
	var hurried atomic.Bool
	stopped := make(chan struct{})
	go func() {
		select {
		case <-e.hurry:
		case <-stopped:
			return
		}
		hurried.Store(true)
		log.Warn("second signal: stopping within "+hurryGrace.String()+"; sends still in flight will be cancelled and their rows released",
			"next", "a third signal exits at once")
		t := time.NewTimer(hurryGrace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-stopped:
		}
	}()
	err := r.Stop(sctx)
	close(stopped)
	switch {
	case err != nil && hurried.Load():
		return fmt.Errorf("stopped early on a second signal: sends still in flight were cancelled and their rows released: %w", err)
	case err != nil:
		return fmt.Errorf("graceful stop did not finish within %s: %w", timeout, err)
	}
	log.Info("relay stopped")
	return nil
}

// hurryGrace is what is left of the graceful stop after a second signal.
const hurryGrace = 2 * time.Second
