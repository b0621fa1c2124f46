// Package e2e holds txbox's end-to-end delivery tests: real databases
// (PostgreSQL, MariaDB, SQLite through the storeKind harness), the real
// relay, and real destinations (NATS JetStream, an httptest webhook
// receiver). Every test publishes events with known ids, reads back what
// arrived, and lets the oracle sort them into ok / lost / duplicated /
// unexpected (docs/testing.md, "The delivery oracle"). Relay processes are
// the test binary re-executed in child mode (TestMain). Long chaos runs need TXBOX_CHAOS=1;
// the drain and pickup benchmarks write their figures to
// docs/benchmarks/relay.md.
package e2e

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	natssender "github.com/txbox/txbox/sender/nats"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// Environment of a child relay process (see startChild).
const (
	envChild     = "TXBOX_E2E_CHILD" // "relay" selects the child mode
	envStore     = "TXBOX_E2E_STORE"
	envNamespace = "TXBOX_E2E_NS"
	envSubject   = "TXBOX_E2E_SUBJECT"
	envAcks      = "TXBOX_E2E_ACKS"
	envRetention = "TXBOX_E2E_RETENTION"
	envLease     = "TXBOX_E2E_LEASE"      // lease duration; empty = default
	envStats     = "TXBOX_E2E_STATS"      // file for "fenced=N" at exit
	envDelay     = "TXBOX_E2E_SEND_DELAY" // a slow destination: delay before each send
	envOrdering  = "TXBOX_E2E_ORDERING"   // "key": every type ordering: key
	envBatch     = "TXBOX_E2E_BATCH_SIZE" // every type's batch-size; empty = default
	// envSendLog names a file the child appends each send to, when it
	// begins and when it ends (sendLog); envHealthLog one it appends its
	// stream's health to every 50ms (healthLog). Both empty = none.
	envSendLog   = "TXBOX_E2E_SEND_LOG"
	envHealthLog = "TXBOX_E2E_HEALTH_LOG"
	// envFanout, "webhook-url kafka-addr kafka-topic", fans "orders" out
	// to three routes: the NATS subject, the webhook and the Kafka topic
	// (fanoutRoutes).
	envFanout = "TXBOX_E2E_FANOUT"
)

// TestMain runs the tests, or, when the test binary was re-executed as a
// child relay process, the relay.
func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "relay" {
		os.Exit(childRelay())
	}
	os.Exit(m.Run())
}

func quietLogger() *slog.Logger {
	if os.Getenv("TXBOX_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// relayConfig is the configuration every delivery test's relay shares:
// NATS subjects under subjectPrefix, "orders" configured, other types
// discovered, fast polling and maintenance so tests finish quickly.
//
// A driver openStore opened for a lock kind gets that kind's claim mode.
func relayConfig(d store.Driver, s sender.Sender, subjectPrefix string, retention time.Duration) relay.Config {
	var claim *txbox.ClaimMode
	if c, ok := claimOf.Load(d); ok {
		claim = new(c.(txbox.ClaimMode))
	}
	var stream relay.StreamConfig
	if pd, ok := d.(*postgres.Driver); ok && pd.Source() == postgres.SourceWAL {
		stream = walStreamConfig()
	}
	return relay.Config{
		Stream:  stream,
		Store:   d,
		Senders: map[string]sender.Sender{"nats": s},
		Defaults: relay.EventSettings{
			Route:     &sender.Route{Subject: subjectPrefix + ".{event_type}"},
			Polling:   &relay.PollingSettings{MinDelay: new(10 * time.Millisecond), MaxDelay: new(200 * time.Millisecond)},
			Backoff:   &relay.BackoffSettings{Delay: new(100 * time.Millisecond), Multiplier: new(2.0), Max: new(time.Second)},
			Retention: &retention,
			Claim:     claim,
		},
		Events:             map[string]relay.EventSettings{"orders": {}},
		DiscoverInterval:   100 * time.Millisecond,
		RecoverInterval:    100 * time.Millisecond,
		DeadLetterInterval: 100 * time.Millisecond,
		Circuit:            relay.CircuitConfig{CoolDown: 100 * time.Millisecond, MaxCoolDown: 500 * time.Millisecond},
		Logger:             quietLogger(),
	}
}

// childRelay runs one relay until SIGTERM, then stops it gracefully and
// writes the ids the destination acknowledged to the acks file, one per
// line. It prints "ready" once the relay runs.
func childRelay() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "child relay:", err)
		return 2
	}
	kind, err := storeKindByName(os.Getenv(envStore))
	if err != nil {
		return fail(err)
	}
	d, closeStore, err := kind.open(os.Getenv(envNamespace), 8)
	if err != nil {
		return fail(err)
	}
	defer closeStore()
	ns, err := natssender.New(natssender.Config{URL: testenv.NATSURL})
	if err != nil {
		return fail(err)
	}
	paused := &pauseCounter{Sender: ns}
	go paused.watch()
	var snd sender.Sender = paused
	if v := os.Getenv(envDelay); v != "" {
		delay, err := time.ParseDuration(v)
		if err != nil {
			return fail(err)
		}
		snd = slowSender{Sender: paused, delay: delay}
	}
	if path := os.Getenv(envSendLog); path != "" {
		sl, err := openSendLog(snd, path)
		if err != nil {
			return fail(err)
		}
		defer sl.close()
		snd = sl
	}
	acks := newAckCounter(snd)
	retention, err := time.ParseDuration(os.Getenv(envRetention))
	if err != nil {
		return fail(err)
	}
	cfg := relayConfig(d, acks, os.Getenv(envSubject), retention)
	if v := os.Getenv(envLease); v != "" {
		lease, err := time.ParseDuration(v)
		if err != nil {
			return fail(err)
		}
		cfg.Defaults.LeaseDuration = &lease
	}
	if kind.claim != "" {
		cfg.Defaults.Claim = &kind.claim
	}
	if v := os.Getenv(envOrdering); v != "" {
		o := txbox.Ordering(v)
		cfg.Defaults.Ordering = &o
	}
	if v := os.Getenv(envBatch); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fail(err)
		}
		cfg.Defaults.BatchSize = &n
	}
	if v := os.Getenv(envFanout); v != "" {
		if err := fanoutRoutes(&cfg, v); err != nil {
			return fail(err)
		}
	}
	fenced := &fenceCounter{paused: paused}
	cfg.Hooks = append(cfg.Hooks, fenced)
	r, err := relay.New(cfg)
	if err != nil {
		return fail(err)
	}
	sig, stopSig := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stopSig()
	if err := r.Start(context.Background()); err != nil {
		return fail(err)
	}
	if path := os.Getenv(envHealthLog); path != "" {
		stopHealth, err := writeHealthLog(r, path)
		if err != nil {
			return fail(err)
		}
		defer stopHealth()
	}
	fmt.Println("ready")
	<-sig.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.Stop(ctx); err != nil {
		return fail(err)
	}
	var pauses, pauseDropped int64
	if st := r.Health().Stream; st != nil {
		pauses, pauseDropped = st.Pauses, st.Dropped
	}
	if err := ns.Close(ctx); err != nil {
		return fail(err)
	}
	var b strings.Builder
	for _, id := range acks.ids() {
		b.WriteString(id.String())
		b.WriteByte('\n')
	}
	if err := os.WriteFile(os.Getenv(envAcks), []byte(b.String()), 0o600); err != nil {
		return fail(err)
	}
	if path := os.Getenv(envStats); path != "" {
		if err := os.WriteFile(path, fmt.Appendf(nil, "fenced=%d finish-errors=%d pauses=%d pause-dropped=%d sent-after-pause=%d stream-sent-after-pause=%d stream-unsent-after-pause=%d\n",
			fenced.n.Load(), fenced.errs.Load(), pauses, pauseDropped, paused.sent.Load(), fenced.streamAfter.Load(), fenced.streamUnsent.Load()), 0o600); err != nil {
			return fail(err)
		}
	}
	return 0
}

// slowSender waits before each send, like a destination with high
// latency, so that a relay spends most of its time with batches in flight.
type slowSender struct {
	sender.Sender
	delay time.Duration
}

func (s slowSender) Send(ctx context.Context, msgs []*sender.Message) error {
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return s.Sender.Send(ctx, msgs)
}

// pauseCounter counts the messages a child relay hands to the broker
// after its process was stopped and resumed (SIGSTOP, SIGCONT): a relay
// that drops what it holds on a pause sends then at most the batches that
// were already in flight.
type pauseCounter struct {
	sender.Sender
	resumed atomic.Bool
	sent    atomic.Int64
	// resumedAt is the late tick of the last pause (UnixNano), which
	// the ticker fires at once on the resume (fenceCounter.OnBatch).
	resumedAt atomic.Int64
}

// resumeSlack is how long before the pause watch's late tick the process
// may have resumed: that tick is due at once on the resume, so it runs
// within a few milliseconds of it. It is below the first relay's sender
// delay (100 ms, TestWALChaosTakeover), the shortest send of a batch
// that fenceCounter.OnBatch could take for one begun after the resume.
const resumeSlack = 50 * time.Millisecond

// watch notices the resume: a tick 20 ms apart that comes over a second
// late.
func (p *pauseCounter) watch() {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	last := time.Now()
	for range t.C {
		now := time.Now()
		if gap := now.Sub(last); gap > time.Second {
			p.resumedAt.Store(now.UnixNano())
			p.resumed.Store(true)
		}
		last = now
	}
}

func (p *pauseCounter) Send(ctx context.Context, msgs []*sender.Message) error {
	if p.resumed.Load() {
		p.sent.Add(int64(len(msgs)))
	}
	return p.Sender.Send(ctx, msgs)
}

// fenceCounter counts finishes fenced because the lease was lost, and
// finishes that failed (with the lock claim: a transaction the database
// ended, so nothing of it committed).
type fenceCounter struct {
	txbox.NopRelayHook
	n, errs atomic.Int64
	// streamAfter counts the events of WAL mode's stream batches whose
	// send began after the process was stopped: a relay resumed from a
	// pause has lost its stream and must start none (the table pollers'
	// batches, which deliver rows in the table, are not counted, nor the
	// batches that reached the send and sent nothing).
	paused      *pauseCounter
	streamAfter atomic.Int64
	// streamUnsent counts the events of the stream batches that reached
	// the send after the pause and sent nothing.
	streamUnsent atomic.Int64
}

func (f *fenceCounter) OnBatch(ev txbox.BatchEvent) {
	f.n.Add(int64(ev.Fenced))
	if ev.FinishErr != nil {
		f.errs.Add(1)
	}
	if ev.Claim != txbox.ClaimStream || f.paused == nil || !f.paused.resumed.Load() {
		return
	}
	// A batch whose session was lost by then sends nothing (SendDuration
	// is zero): its events are released to the relay that holds the
	// stream, which is what the guarantee asks.
	//
	// began is when the send began, or later: the steps between the
	// send's end and the finish's start, and after the finish, count in
	// neither duration. A pause that lands there moves began past the
	// pause by its whole length, for a batch whose send had ended before
	// the stop: began then comes before the resume by at least its
	// send's length (over resumeSlack). A send begun after the resume has
	// began after it, so no earlier than resumeSlack before the late tick.
	// Counting from halfway through the pause, as this once did, counted
	// such a batch, sent before the stop and finished after it, as begun
	// after the pause.
	began := time.Now().Add(-ev.FinishDuration - ev.SendDuration)
	if began.UnixNano() <= f.paused.resumedAt.Load()-resumeSlack.Nanoseconds() {
		return
	}
	n := int64(ev.Sent + ev.Retried + ev.Failed + ev.Released)
	if ev.SendDuration > 0 {
		f.streamAfter.Add(n)
	} else {
		f.streamUnsent.Add(n)
	}
}

// child is a relay running in a child process.
type child struct {
	cmd   *exec.Cmd
	acks  string
	stats string
	done  chan error
}

// startChild re-executes the test binary as a relay process and waits
// until it runs. The process is killed if the test ends first.
func startChild(t *testing.T, kind storeKind, ns, subjectPrefix string, retention time.Duration, extraEnv ...string) *child {
	t.Helper()
	dir := t.TempDir()
	acks, stats := dir+"/acks", dir+"/stats"
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		envChild+"=relay", envStore+"="+kind.name, envNamespace+"="+ns,
		envSubject+"="+subjectPrefix, envAcks+"="+acks, envRetention+"="+retention.String(), envStats+"="+stats)
	cmd.Env = append(cmd.Env, extraEnv...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, acks: acks, stats: stats, done: make(chan error, 1)}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if !ok && sc.Text() == "ready" {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("child relay exited before it was ready")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("child relay not ready within 60s")
	}
	return c
}

// stop sends SIGTERM and waits for a clean exit.
func (c *child) stop(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case err := <-c.done:
		if err != nil {
			t.Fatalf("child relay: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("child relay did not stop within 60s of SIGTERM")
	}
}
