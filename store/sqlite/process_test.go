package sqlite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store"
)

// Child processes re-run this test binary with TXBOX_SQLITE_CHILD set to a
// role and TXBOX_SQLITE_PATH to the database file.
const (
	childRoleEnv = "TXBOX_SQLITE_CHILD"
	childPathEnv = "TXBOX_SQLITE_PATH"
)

// TestChildProcess is not a test of its own: it is the body of the child
// processes the tests below start. Without the environment it returns.
func TestChildProcess(t *testing.T) {
	role := os.Getenv(childRoleEnv)
	if role == "" {
		return
	}
	path := os.Getenv(childPathEnv)
	d, err := Open(path, Config{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	ctx := context.Background()
	switch role {
	case "claimer":
		// Claim and ack until three empty polls in a row; print every id.
		empty := 0
		for empty < 3 {
			rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "multi", Limit: 13, LeaseDuration: time.Minute})
			if err != nil {
				fmt.Println("error", err)
				os.Exit(2)
			}
			if len(rows) == 0 {
				empty++
				continue
			}
			empty = 0
			items := make([]store.OutboxFinishItem, len(rows))
			for i, r := range rows {
				fmt.Println("claimed", r.ID)
				items[i] = store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: store.OutcomeAcked}
			}
			res, err := d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: items, DeleteAcked: true})
			if err != nil || res.Finished != len(rows) {
				fmt.Println("error finish", res, err)
				os.Exit(2)
			}
		}
		fmt.Println("done")
		os.Exit(0)
	case "chaos-claimer":
		// A relay: recover expired leases, claim with a short lease,
		// "send", ack. It reports each claim before acking it.
		empty := 0
		for empty < 5 {
			if _, err := d.OutboxRecover(ctx, &store.OutboxRecoverParams{Limit: 100}); err != nil {
				fmt.Println("error recover", err)
				os.Exit(2)
			}
			rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "chaos", Limit: 5, LeaseDuration: chaosLease})
			if err != nil {
				fmt.Println("error", err)
				os.Exit(2)
			}
			if len(rows) == 0 {
				empty++
				time.Sleep(chaosLease / 4) // idle poll
				continue
			}
			empty = 0
			items := make([]store.OutboxFinishItem, len(rows))
			for i, r := range rows {
				fmt.Println("claimed", r.ID)
				items[i] = store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: store.OutcomeAcked}
			}
			// The send: the window in which the parent kills relays.
			fmt.Println("sending")
			time.Sleep(chaosSend)
			res, err := d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: items})
			if err != nil {
				fmt.Println("error finish", err)
				os.Exit(2)
			}
			if res.Fenced > 0 {
				// This relay was too slow: its lease expired and another
				// relay took rows over. At-least-once allows it.
				fmt.Println("fenced", res.Fenced)
			}
		}
		fmt.Println("done")
		os.Exit(0)
	case "killed-publisher":
		// Publish inside a transaction, say so, and wait to be killed
		// while the transaction holds the write lock.
		tx, err := d.DB().BeginTx(ctx, nil)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		ev := &txbox.Event{ID: txbox.NewID(), Type: "killed", Payload: []byte("never")}
		if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{ev}}); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		fmt.Println("holding", ev.ID)
		select {} // until SIGKILL
	}
	os.Exit(3)
}

func startChild(t *testing.T, role, path string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), childRoleEnv+"="+role, childPathEnv+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewScanner(out)
}

// TestMultiProcessClaimExclusive: three relay processes drain one file
// while this process publishes more. Every event is claimed exactly once
// and no process sees an error (SQLITE_BUSY included).
func TestMultiProcessClaimExclusive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const first, more = 600, 150
	evs := make([]*txbox.Event, first)
	for i := range evs {
		evs[i] = newEvent("multi", "")
	}
	publish(t, b.d, evs...)
	published := map[txbox.ID]bool{}
	for _, e := range evs {
		published[e.ID] = true
	}

	var (
		mu      sync.Mutex
		seen    = map[txbox.ID]int{}
		wg      sync.WaitGroup
		failure = make(chan string, 8)
	)
	for i := 0; i < 3; i++ {
		cmd, out := startChild(t, "claimer", b.path)
		wg.Go(func() {
			done := false
			for out.Scan() {
				line := out.Text()
				switch {
				case strings.HasPrefix(line, "claimed "):
					id, err := txbox.ParseID(strings.TrimPrefix(line, "claimed "))
					if err != nil {
						failure <- line
						continue
					}
					mu.Lock()
					seen[id]++
					mu.Unlock()
				case line == "done":
					done = true
				case strings.HasPrefix(line, "error"):
					failure <- line
				}
			}
			if err := cmd.Wait(); err != nil || !done {
				failure <- fmt.Sprintf("child exited: %v (done=%v)", err, done)
			}
		})
	}
	// Publish more while the children drain, one event per transaction.
	for i := 0; i < more; i++ {
		e := newEvent("multi", "")
		publish(t, b.d, e)
		mu.Lock()
		published[e.ID] = true
		mu.Unlock()
	}
	wg.Wait()
	close(failure)
	for f := range failure {
		t.Error(f)
	}
	// Children stop after idle polls: whatever they left must still be
	// claimable here, never lost.
	for _, r := range claim(t, b.d, "multi", 1000, time.Minute, false) {
		seen[r.ID]++
	}
	for id, n := range seen {
		if n != 1 || !published[id] {
			t.Fatalf("event %s claimed %d times (published: %v)", id, n, published[id])
		}
	}
	if len(seen) != first+more {
		t.Fatalf("claimed %d distinct events, want %d", len(seen), first+more)
	}
}

// TestKilledWriterReleasesLock: a process killed while its business
// transaction holds the write lock leaves no row behind, and the lock is
// free at once for the next writer (SQLite's WAL recovery), without
// waiting for the busy timeout.
func TestKilledWriterReleasesLock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cmd, out := startChild(t, "killed-publisher", b.path)
	var held txbox.ID
	for out.Scan() {
		if line := out.Text(); strings.HasPrefix(line, "holding ") {
			var err error
			if held, err = txbox.ParseID(strings.TrimPrefix(line, "holding ")); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if held == (txbox.ID{}) {
		t.Fatal("child never reported its transaction")
	}
	// While the child holds the lock, a claim waits and gives up when its
	// context ends, long before BusyTimeout.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	start := time.Now()
	_, err := b.d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "killed", Limit: 10, LeaseDuration: time.Minute})
	cancel()
	if err == nil {
		t.Fatal("claim succeeded while another process held the write lock")
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("claim ignored its context: returned after %s", waited)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	// The next writer gets the lock promptly and sees nothing of the dead
	// transaction.
	start = time.Now()
	ok := newEvent("killed", "")
	publish(t, b.d, ok)
	rows := claim(t, b.d, "killed", 10, time.Minute, false)
	if len(rows) != 1 || rows[0].ID != ok.ID {
		t.Fatalf("after the kill claimed %v, want only %s (the killed tx's %s must not exist)", ids(rows), ok.ID, held)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("the lock of the killed process was held for %s", waited)
	}
	if s, _ := status(t, b.d, held); s != "" {
		t.Fatalf("the killed transaction's row exists with status %s", s)
	}
}

// TestCancelledWriterFreesQueue: a write call whose context ends while it
// waits for SQLite's lock returns the context's error and leaves the
// Driver usable (the in-process writer slot is released).
func TestCancelledWriterFreesQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	publish(t, b.d, newEvent("cancel", ""))
	// A business transaction on the same pool holds the write lock.
	tx, err := b.d.DB().BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.d.OutboxInsert(context.Background(), tx, &store.OutboxInsertParams{Events: []*txbox.Event{newEvent("cancel", "")}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	_, err = b.d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "cancel", Limit: 10, LeaseDuration: time.Minute})
	cancel()
	if err == nil {
		t.Fatal("claim succeeded while the write lock was held")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("claim error under a held lock does not say why: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	rows := claim(t, b.d, "cancel", 10, time.Minute, false)
	if len(rows) != 2 {
		t.Fatalf("after the lock was released claimed %d, want 2", len(rows))
	}
}

// TestBusyTimeoutIsErrBusy: when another connection holds the write lock
// longer than BusyTimeout, a write fails with an error matching ErrBusy
// and changes nothing.
func TestBusyTimeoutIsErrBusy(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "busy.db")
	holder := openDriver(t, path, "")
	if err := holder.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	impatient, err := Open(path, Config{BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer impatient.Close()
	publish(t, holder, newEvent("busy", ""))

	tx, err := holder.DB().BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	_, err = impatient.OutboxClaim(context.Background(), &store.OutboxClaimParams{EventType: "busy", Limit: 1, LeaseDuration: time.Minute})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("claim against a held lock: %v, want ErrBusy", err)
	}
	tx.Rollback()
	if rows := claim(t, impatient, "busy", 10, time.Minute, false); len(rows) != 1 {
		t.Fatalf("after the lock was released claimed %d, want 1 (the busy claim must change nothing)", len(rows))
	}
}

// chaosLease is the children's lease in TestKilledClaimersLoseNothing:
// short, so rows of a killed relay come back quickly.
const chaosLease = time.Second

// chaosSend is how long a chaos relay "sends" a batch before acking it.
const chaosSend = 100 * time.Millisecond

// TestKilledClaimersLoseNothing runs relay processes on one file and
// SIGKILLs them while they hold a claimed batch (between claim and
// finish) or just after (during the finish or the next claim, possibly
// inside a write transaction). Afterwards every published event
// is PROCESSED (nothing lost), a row was claimed twice only when its
// earlier claimer was killed or lost its lease (a fenced finish), and the
// database passes PRAGMA integrity_check. The
// default run kills 3 processes; TXBOX_CHAOS=1 kills 25 over a larger
// backlog.
func TestKilledClaimersLoseNothing(t *testing.T) {
	t.Parallel()
	kills, total := 3, 600
	if os.Getenv("TXBOX_CHAOS") != "" {
		kills, total = 25, 6000
	}
	b := setup(t)
	evs := make([]*txbox.Event, total)
	for i := range evs {
		evs[i] = newEvent("chaos", "")
	}
	for i := 0; i < total; i += 500 {
		publish(t, b.d, evs[i:min(i+500, total)]...)
	}

	type child struct {
		cmd     *exec.Cmd
		killed  bool
		fenced  bool // a finish of this relay was fenced: its lease expired
		ids     []txbox.ID
		done    chan struct{}
		sending chan struct{} // a signal per batch in its send window
		err     string
	}
	var mu sync.Mutex
	start := func() *child {
		cmd, out := startChild(t, "chaos-claimer", b.path)
		c := &child{cmd: cmd, done: make(chan struct{}), sending: make(chan struct{}, 1)}
		go func() {
			defer close(c.done)
			for out.Scan() {
				line := out.Text()
				if id, ok := strings.CutPrefix(line, "claimed "); ok {
					if parsed, err := txbox.ParseID(id); err == nil {
						mu.Lock()
						c.ids = append(c.ids, parsed)
						mu.Unlock()
					}
				} else if line == "sending" {
					select {
					case c.sending <- struct{}{}:
					default:
					}
				} else if strings.HasPrefix(line, "fenced ") {
					mu.Lock()
					c.fenced = true
					mu.Unlock()
				} else if strings.HasPrefix(line, "error") {
					mu.Lock()
					c.err = line
					mu.Unlock()
				}
			}
			_ = cmd.Wait()
		}()
		return c
	}
	children := []*child{start(), start(), start()}
	live := slices.Clone(children)
	for k := 0; k < kills; k++ {
		// Kill one of the three live relays while it holds a batch: in
		// its send window, between claim and finish.
		victim := live[k%3]
		select {
		case <-victim.sending:
			// Drop a signal left from an earlier batch, wait for a fresh one.
			select {
			case <-victim.sending:
			case <-victim.done:
			}
		case <-victim.done:
		}
		if k%2 == 1 {
			// Every other kill lands a little after the send window ends:
			// during the finish or the next claim, inside a write
			// transaction or between two.
			select {
			case <-time.After(chaosSend + time.Duration(k%7)*3*time.Millisecond):
			case <-victim.done:
			}
		}
		if err := victim.cmd.Process.Signal(syscall.SIGKILL); err == nil {
			mu.Lock()
			victim.killed = true
			mu.Unlock()
		}
		<-victim.done
		fresh := start()
		children = append(children, fresh)
		live[k%3] = fresh
	}
	for _, c := range children {
		<-c.done
	}

	// Whatever the killed relays held comes back after its lease.
	ctx := context.Background()
	testenv.WaitFor(t, 30*time.Second, "every event PROCESSED", func() bool {
		if _, err := b.d.OutboxRecover(ctx, &store.OutboxRecoverParams{Limit: 1000}); err != nil {
			t.Fatal(err)
		}
		if rows := claim(t, b.d, "chaos", 1000, time.Minute, false); len(rows) > 0 {
			mu.Lock()
			last := &child{ids: ids(rows)}
			children = append(children, last)
			mu.Unlock()
			finish(t, b.d, store.OutcomeAcked, 0, rows...)
		}
		var left int
		if err := b.d.DB().QueryRow(`SELECT count(*) FROM txbox_outbox WHERE status <> 'PROCESSED'`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	})
	var processed int
	if err := b.d.DB().QueryRow(`SELECT count(*) FROM txbox_outbox WHERE status = 'PROCESSED'`).Scan(&processed); err != nil {
		t.Fatal(err)
	}
	if processed != total {
		t.Fatalf("%d of %d events PROCESSED: lost %d", processed, total, total-processed)
	}

	mu.Lock()
	defer mu.Unlock()
	claimedBy := map[txbox.ID][]*child{}
	killed := 0
	for _, c := range children {
		if c.err != "" {
			t.Errorf("a relay failed: %s", c.err)
		}
		if c.killed {
			killed++
		}
		for _, id := range c.ids {
			claimedBy[id] = append(claimedBy[id], c)
		}
	}
	dups := 0
	for id, cs := range claimedBy {
		if len(cs) == 1 {
			continue
		}
		dups++
		// All claimers but the one that finished it lost the row: killed,
		// or so slow their lease expired (their finish was fenced).
		healthy := 0
		for _, c := range cs {
			if !c.killed && !c.fenced {
				healthy++
			}
		}
		if healthy > 1 {
			t.Fatalf("event %s claimed by %d relays that were neither killed nor fenced", id, healthy)
		}
	}
	if killed == 0 || dups == 0 {
		t.Fatalf("%d kills landed, %d rows claimed again: the test did not crash a relay holding rows", killed, dups)
	}
	var check string
	if err := b.d.DB().QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check: %q, %v", check, err)
	}
	t.Logf("%d events, %d relays killed, %d events claimed again after a kill, 0 lost", total, killed, dups)
}
