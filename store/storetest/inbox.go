package storetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/store"
)

var errBoom = errors.New("storetest: handler failure")

// inboxEnv is the shared state of one Inbox run: most subtests share a
// namespace and isolate themselves by consumer name, because creating and
// migrating a namespace is the expensive part.
type inboxEnv struct {
	h  InboxHarness
	ns string
	st InboxStore
}

func (e *inboxEnv) handler(consumer string) inbox.Handler {
	return e.h.EffectHandler(e.ns, consumer)
}

func (e *inboxEnv) newInbox(t testing.TB, cfg inbox.Config) *inbox.Inbox {
	t.Helper()
	in, err := inbox.New(e.st, cfg)
	if err != nil {
		t.Fatalf("inbox.New: %v", err)
	}
	return in
}

func (e *inboxEnv) expectEffects(t testing.TB, consumer string, want map[txbox.ID]int) {
	t.Helper()
	e.h.ExpectEffects(t, e.ns, consumer, want)
}

func newIDs(n int) []txbox.ID {
	out := make([]txbox.ID, n)
	for i := range out {
		out[i] = txbox.NewID()
	}
	return out
}

func newInboxEnv(t *testing.T, h InboxHarness) *inboxEnv {
	t.Helper()
	ns, st := h.Setup(t)
	return &inboxEnv{h: h, ns: ns, st: st}
}

// ExerciseInbox runs the inbox suite against the dialect behind h: its store.Inbox
// driven through the real inbox.Inbox and inbox.Cleaner. The calling
// package must also define TestInboxHelperProcess calling
// InboxHelperProcess with an equivalent harness.
func ExerciseInbox(t *testing.T, h InboxHarness) {
	e := newInboxEnv(t, h)
	t.Run("ProcessedThenDuplicate", func(t *testing.T) { t.Parallel(); testProcessedThenDuplicate(t, e) })
	t.Run("ConsumersAreIndependent", func(t *testing.T) { t.Parallel(); testConsumersIndependent(t, e) })
	t.Run("HandlerErrorRollsBackID", func(t *testing.T) { t.Parallel(); testHandlerError(t, e) })
	t.Run("PanicRollsBackID", func(t *testing.T) { t.Parallel(); testPanic(t, e) })
	t.Run("NonTransactionalIsAtMostOnce", func(t *testing.T) { t.Parallel(); testNonTransactional(t, e) })
	t.Run("Batch", func(t *testing.T) { t.Parallel(); testBatch(t, e) })
	t.Run("BatchErrorRecordsNothing", func(t *testing.T) { t.Parallel(); testBatchError(t, e) })
	t.Run("RecordSeam", func(t *testing.T) { t.Parallel(); testRecordSeam(t, e) })
	t.Run("HandleInCallerTx", func(t *testing.T) { t.Parallel(); testHandleInTx(t, e) })
	t.Run("HostileConsumerNames", func(t *testing.T) { t.Parallel(); testHostileNames(t, e) })
	t.Run("ConcurrentDuplicates", func(t *testing.T) { t.Parallel(); testConcurrent(t, e) })
	t.Run("ConcurrentOverlappingBatches", func(t *testing.T) { t.Parallel(); testConcurrentBatches(t, e) })
	t.Run("CleanupTTLBoundary", func(t *testing.T) { t.Parallel(); testCleanupBoundary(t, h) })
	t.Run("CleanerLease", func(t *testing.T) { t.Parallel(); testCleanerLease(t, h) })
}

func testProcessedThenDuplicate(t *testing.T, e *inboxEnv) {
	in := e.newInbox(t, inbox.Config{Consumer: "dup"})
	ctx := context.Background()
	id := txbox.NewID()
	calls := 0
	h := func(ctx context.Context, tx any, m inbox.Message) error {
		calls++
		if m.ID != id || string(m.Payload) != "p" {
			t.Errorf("handler got %v %q", m.ID, m.Payload)
		}
		if tx == nil {
			t.Error("transactional handler got a nil tx")
		}
		return e.handler("dup")(ctx, tx, m)
	}
	msg := inbox.Message{ID: id, Type: "t", Payload: []byte("p")}
	r, err := in.Handle(ctx, msg, h)
	if err != nil || r != inbox.Processed {
		t.Fatalf("first Handle = %v, %v; want processed", r, err)
	}
	for i := 0; i < 3; i++ {
		r, err = in.Handle(ctx, msg, h)
		if err != nil || r != inbox.Duplicate {
			t.Fatalf("redelivery Handle = %v, %v; want duplicate", r, err)
		}
	}
	if calls != 1 {
		t.Errorf("handler ran %d times, want 1", calls)
	}
	e.expectEffects(t, "dup", map[txbox.ID]int{id: 1})
	if n := e.h.CountInbox(t, e.ns, "dup"); n != 1 {
		t.Errorf("inbox rows = %d, want 1", n)
	}
	if _, err := in.Handle(ctx, inbox.Message{}, h); !errors.Is(err, inbox.ErrMissingID) {
		t.Errorf("zero id: err = %v, want ErrMissingID", err)
	}
}

func testConsumersIndependent(t *testing.T, e *inboxEnv) {
	ctx := context.Background()
	id := txbox.NewID()
	for _, c := range []string{"indep-a", "indep-b"} {
		in := e.newInbox(t, inbox.Config{Consumer: c})
		if r, err := in.Handle(ctx, inbox.Message{ID: id}, e.handler(c)); err != nil || r != inbox.Processed {
			t.Fatalf("consumer %s: %v, %v; want processed", c, r, err)
		}
		e.expectEffects(t, c, map[txbox.ID]int{id: 1})
	}
}

func testHandlerError(t *testing.T, e *inboxEnv) {
	in := e.newInbox(t, inbox.Config{Consumer: "herr"})
	ctx := context.Background()
	id := txbox.NewID()
	failing := func(ctx context.Context, tx any, m inbox.Message) error {
		if err := e.h.InsertEffect(ctx, tx, e.ns, "herr", m.ID); err != nil {
			return err
		}
		return errBoom
	}
	r, err := in.Handle(ctx, inbox.Message{ID: id}, failing)
	var he *inbox.HandlerError
	if r != inbox.Failed || !errors.As(err, &he) || !errors.Is(err, errBoom) {
		t.Fatalf("Handle = %v, %v; want failed with a *HandlerError wrapping errBoom", r, err)
	}
	if len(he.IDs) != 1 || he.IDs[0] != id {
		t.Errorf("HandlerError.IDs = %v", he.IDs)
	}
	e.expectEffects(t, "herr", map[txbox.ID]int{})
	if n := e.h.CountInbox(t, e.ns, "herr"); n != 0 {
		t.Fatalf("inbox rows after a failed handler = %d, want 0", n)
	}
	if r, err := in.Handle(ctx, inbox.Message{ID: id}, e.handler("herr")); err != nil || r != inbox.Processed {
		t.Fatalf("redelivery after failure = %v, %v; want processed", r, err)
	}
	e.expectEffects(t, "herr", map[txbox.ID]int{id: 1})
}

func testPanic(t *testing.T, e *inboxEnv) {
	in := e.newInbox(t, inbox.Config{Consumer: "panic"})
	ctx := context.Background()
	id := txbox.NewID()
	r, err := in.Handle(ctx, inbox.Message{ID: id}, func(ctx context.Context, tx any, m inbox.Message) error {
		if err := e.h.InsertEffect(ctx, tx, e.ns, "panic", m.ID); err != nil {
			return err
		}
		panic("boom")
	})
	var pe *inbox.PanicError
	if r != inbox.Failed || !errors.As(err, &pe) || pe.Value != "boom" || len(pe.Stack) == 0 {
		t.Fatalf("Handle = %v, %v; want failed with a *PanicError(boom)", r, err)
	}
	e.expectEffects(t, "panic", map[txbox.ID]int{})
	if n := e.h.CountInbox(t, e.ns, "panic"); n != 0 {
		t.Fatalf("inbox rows after a panic = %d, want 0", n)
	}
	if r, err := in.Handle(ctx, inbox.Message{ID: id}, e.handler("panic")); err != nil || r != inbox.Processed {
		t.Fatalf("redelivery after panic = %v, %v; want processed", r, err)
	}
	e.expectEffects(t, "panic", map[txbox.ID]int{id: 1})
}

func testNonTransactional(t *testing.T, e *inboxEnv) {
	in := e.newInbox(t, inbox.Config{Consumer: "amo", Mode: inbox.NonTransactional})
	ctx := context.Background()
	id := txbox.NewID()
	calls := 0
	r, err := in.Handle(ctx, inbox.Message{ID: id}, func(ctx context.Context, tx any, m inbox.Message) error {
		calls++
		if tx != nil {
			t.Errorf("non-transactional handler got tx %T", tx)
		}
		// The id is committed before the handler runs.
		if n := e.h.CountInbox(t, e.ns, "amo"); n != 1 {
			t.Errorf("inbox rows while the handler runs = %d, want 1", n)
		}
		return errBoom
	})
	if r != inbox.Lost || !errors.Is(err, errBoom) {
		t.Fatalf("Handle = %v, %v; want lost (the id stays recorded)", r, err)
	}
	r, err = in.Handle(ctx, inbox.Message{ID: id}, func(context.Context, any, inbox.Message) error { calls++; return nil })
	if r != inbox.Duplicate || err != nil {
		t.Fatalf("redelivery = %v, %v; want duplicate (at-most-once)", r, err)
	}
	if calls != 1 {
		t.Errorf("handler ran %d times, want 1", calls)
	}
}

func testBatch(t *testing.T, e *inboxEnv) {
	in := e.newInbox(t, inbox.Config{Consumer: "batch"})
	ctx := context.Background()
	all := newIDs(6)
	// all[0] and all[1] were processed before.
	for _, id := range all[:2] {
		if r, err := in.Handle(ctx, inbox.Message{ID: id}, e.handler("batch")); err != nil || r != inbox.Processed {
			t.Fatalf("pre-process: %v %v", r, err)
		}
	}
	msgs := []inbox.Message{{ID: all[0]}, {ID: all[2]}, {ID: all[1]}, {ID: all[3]}, {ID: all[2]}, {ID: all[4]}, {ID: all[5]}}
	var seen []txbox.ID
	results, err := in.HandleBatch(ctx, msgs, func(ctx context.Context, tx any, ms []inbox.Message) error {
		for _, m := range ms {
			seen = append(seen, m.ID)
			if err := e.h.InsertEffect(ctx, tx, e.ns, "batch", m.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("HandleBatch: %v", err)
	}
	wantSeen := []txbox.ID{all[2], all[3], all[4], all[5]}
	if fmt.Sprint(seen) != fmt.Sprint(wantSeen) {
		t.Errorf("handler saw %v, want only the new ids in order %v", seen, wantSeen)
	}
	want := []inbox.Result{inbox.Duplicate, inbox.Processed, inbox.Duplicate, inbox.Processed, inbox.Duplicate, inbox.Processed, inbox.Processed}
	if fmt.Sprint(results) != fmt.Sprint(want) {
		t.Errorf("results = %v, want %v", results, want)
	}
	wantEff := map[txbox.ID]int{}
	for _, id := range all {
		wantEff[id] = 1
	}
	e.expectEffects(t, "batch", wantEff)
	// A batch of only duplicates does not call the handler.
	results, err = in.HandleBatch(ctx, msgs[:3], func(context.Context, any, []inbox.Message) error {
		t.Error("handler called for a batch of duplicates")
		return nil
	})
	if err != nil || fmt.Sprint(results) != fmt.Sprint([]inbox.Result{inbox.Duplicate, inbox.Duplicate, inbox.Duplicate}) {
		t.Errorf("all-duplicate batch = %v, %v", results, err)
	}
}

func testBatchError(t *testing.T, e *inboxEnv) {
	in := e.newInbox(t, inbox.Config{Consumer: "batcherr"})
	ctx := context.Background()
	batch := newIDs(5)
	msgs := make([]inbox.Message, len(batch))
	for i, id := range batch {
		msgs[i] = inbox.Message{ID: id}
	}
	results, err := in.HandleBatch(ctx, msgs, func(ctx context.Context, tx any, ms []inbox.Message) error {
		for _, m := range ms {
			if err := e.h.InsertEffect(ctx, tx, e.ns, "batcherr", m.ID); err != nil {
				return err
			}
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("HandleBatch err = %v, want errBoom", err)
	}
	for i, r := range results {
		if r != inbox.Failed {
			t.Errorf("result %d = %v, want failed", i, r)
		}
	}
	if n := e.h.CountInbox(t, e.ns, "batcherr"); n != 0 {
		t.Errorf("inbox rows after a failed batch = %d, want 0", n)
	}
	e.expectEffects(t, "batcherr", map[txbox.ID]int{})
	if _, err := in.HandleBatch(ctx, []inbox.Message{{ID: batch[0]}, {}}, func(context.Context, any, []inbox.Message) error { return nil }); !errors.Is(err, inbox.ErrMissingID) {
		t.Errorf("batch with a zero id: err = %v, want ErrMissingID", err)
	}
}

func testRecordSeam(t *testing.T, e *inboxEnv) {
	ctx := context.Background()
	a, b := txbox.NewID(), txbox.NewID()
	tx, err := e.st.InboxBegin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// Repeated ids are recorded once and reported once, in input order.
	got, err := e.st.InboxRecord(ctx, tx.Native(), &store.InboxRecordParams{Consumer: "seam", IDs: []txbox.ID{b, a, b}})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint([]txbox.ID{b, a}) {
		t.Errorf("InboxRecord = %v, want [%v %v]", got, b, a)
	}
	// In the same transaction they are now taken; the InboxTx itself is
	// accepted as well as its native value.
	got, err = e.st.InboxRecord(ctx, tx, &store.InboxRecordParams{Consumer: "seam", IDs: []txbox.ID{a}})
	if err != nil || len(got) != 0 {
		t.Errorf("second InboxRecord = %v, %v; want none new", got, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Errorf("Rollback after Commit = %v, want nil", err)
	}
	if n := e.h.CountInbox(t, e.ns, "seam"); n != 2 {
		t.Errorf("inbox rows = %d, want 2", n)
	}
	if _, err := e.st.InboxRecord(ctx, nil, &store.InboxRecordParams{Consumer: "seam", IDs: []txbox.ID{a}}); !errors.Is(err, txbox.ErrNoTransaction) {
		t.Errorf("nil tx: err = %v, want ErrNoTransaction", err)
	}
	if _, err := e.st.InboxRecord(ctx, 42, &store.InboxRecordParams{Consumer: "seam", IDs: []txbox.ID{a}}); !errors.Is(err, txbox.ErrNoTransaction) {
		t.Errorf("int tx: err = %v, want an error matching ErrNoTransaction", err)
	}
}

// HostileConsumerNames are consumer names the suite expects to be rejected.
var HostileConsumerNames = []string{
	"", `x"; DROP TABLE t;--`, "a`b", "a'b", "a b", "a/b", "ünïcode", "a\x00b",
	strings.Repeat("x", store.MaxConsumerNameLength+1), strings.Repeat("y", 300),
}

func testHostileNames(t *testing.T, e *inboxEnv) {
	ctx := context.Background()
	for _, name := range HostileConsumerNames {
		_, err := inbox.New(e.st, inbox.Config{Consumer: name})
		var ce *inbox.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, txbox.ErrInvalidIdentifier) {
			t.Errorf("inbox.New(consumer %q) = %v; want a *ConfigError matching ErrInvalidIdentifier", name, err)
		}
		tx, err := e.st.InboxBegin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.st.InboxRecord(ctx, tx.Native(), &store.InboxRecordParams{Consumer: name, IDs: []txbox.ID{txbox.NewID()}})
		_ = tx.Rollback(ctx)
		if !errors.Is(err, txbox.ErrInvalidIdentifier) {
			t.Errorf("InboxRecord(consumer %q) = %v; want ErrInvalidIdentifier", name, err)
		}
	}
	// The longest valid name works and round-trips.
	long := strings.Repeat("c", store.MaxConsumerNameLength)
	in := e.newInbox(t, inbox.Config{Consumer: long})
	if r, err := in.Handle(ctx, inbox.Message{ID: txbox.NewID()}, e.handler(long)); err != nil || r != inbox.Processed {
		t.Errorf("longest consumer name: %v, %v", r, err)
	}
	if n := e.h.CountInbox(t, e.ns, long); n != 1 {
		t.Errorf("inbox rows of the longest name = %d, want 1", n)
	}
}

// Concurrent duplicates: this many goroutines here, helperGoroutines in a
// second process, all delivering the same ids at the same moment.
const (
	concurrentIDs     = 25
	localGoroutines   = 16
	helperGoroutines  = 8
	helperEnv         = "TXBOX_STORETEST_INBOX_HELPER"
	helperNSEnv       = "TXBOX_STORETEST_INBOX_NS"
	helperConsumerEnv = "TXBOX_STORETEST_INBOX_CONSUMER"
	helperIDsEnv      = "TXBOX_STORETEST_INBOX_IDS"
	readyLine         = "storetest-inbox-ready"
	resultPrefix      = "storetest-inbox-result "
)

// deliverAll has g goroutines each deliver every id (in a rotated order, so
// they collide on different ids) once start is closed. It returns the
// number of Processed results; any error fails t.
func deliverAll(t testing.TB, in *inbox.Inbox, h inbox.Handler, all []txbox.ID, g int, start <-chan struct{}) (processed, duplicate int64) {
	var wg sync.WaitGroup
	var p, d atomic.Int64
	for w := 0; w < g; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range all {
				id := all[(i+w)%len(all)]
				r, err := in.Handle(context.Background(), inbox.Message{ID: id}, h)
				if err != nil {
					t.Errorf("Handle(%s): %v", id, err)
					return
				}
				switch r {
				case inbox.Processed:
					p.Add(1)
				case inbox.Duplicate:
					d.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return p.Load(), d.Load()
}

func testConcurrent(t *testing.T, e *inboxEnv) {
	const consumer = "concurrent"
	all := newIDs(concurrentIDs)
	in := e.newInbox(t, inbox.Config{Consumer: consumer})

	strIDs := make([]string, len(all))
	for i, id := range all {
		strIDs[i] = id.String()
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestInboxHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1", InboxHarnessEnv+"="+e.h.Name, helperNSEnv+"="+e.ns, helperConsumerEnv+"="+consumer, helperIDsEnv+"="+strings.Join(strIDs, ","))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitLine := func(prefix string) string {
		deadline := time.After(60 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					_ = cmd.Wait()
					t.Fatalf("helper process ended before %q; stderr:\n%s", prefix, stderr.String())
				}
				if strings.HasPrefix(l, prefix) {
					return strings.TrimPrefix(l, prefix)
				}
			case <-deadline:
				_ = cmd.Process.Kill()
				t.Fatalf("helper process: no %q within 60s; stderr:\n%s", prefix, stderr.String())
			}
		}
	}
	waitLine(readyLine)

	start := make(chan struct{})
	type res struct{ p, d int64 }
	local := make(chan res, 1)
	go func() {
		p, d := deliverAll(t, in, e.handler(consumer), all, localGoroutines, start)
		local <- res{p, d}
	}()
	close(start)
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatalf("release helper: %v", err)
	}
	lr := <-local
	var cp, cd int64
	if _, err := fmt.Sscanf(waitLine(resultPrefix), "%d %d", &cp, &cd); err != nil {
		t.Fatalf("helper result: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper process: %v; stderr:\n%s", err, stderr.String())
	}
	t.Logf("this process: %d processed, %d duplicate; helper process: %d processed, %d duplicate", lr.p, lr.d, cp, cd)

	want := map[txbox.ID]int{}
	for _, id := range all {
		want[id] = 1
	}
	e.expectEffects(t, consumer, want)
	if got := lr.p + cp; got != int64(len(all)) {
		t.Errorf("processed results across both processes = %d, want %d (one per id)", got, len(all))
	}
	total := int64(len(all) * (localGoroutines + helperGoroutines))
	if got := lr.p + lr.d + cp + cd; got != total {
		t.Errorf("results = %d, want %d", got, total)
	}
}

// InboxHelperProcess is the child side of the concurrent-duplicates test: it
// picks the harness named by InboxHarnessEnv. It returns at once unless the
// parent started this process.
func InboxHelperProcess(t *testing.T, harnesses ...InboxHarness) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	i := slices.IndexFunc(harnesses, func(h InboxHarness) bool { return h.Name == os.Getenv(InboxHarnessEnv) })
	if i < 0 {
		t.Fatalf("helper: no harness named %q", os.Getenv(InboxHarnessEnv))
	}
	h := harnesses[i]
	ns, consumer := os.Getenv(helperNSEnv), os.Getenv(helperConsumerEnv)
	var all []txbox.ID
	for _, s := range strings.Split(os.Getenv(helperIDsEnv), ",") {
		id, err := txbox.ParseID(s)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, id)
	}
	e := &inboxEnv{h: h, ns: ns, st: h.Open(t, ns)}
	in := e.newInbox(t, inbox.Config{Consumer: consumer})
	fmt.Println(readyLine)
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatalf("helper: read go: %v", err)
	}
	start := make(chan struct{})
	close(start)
	p, d := deliverAll(t, in, e.handler(consumer), all, helperGoroutines, start)
	fmt.Println(resultPrefix + strconv.FormatInt(p, 10) + " " + strconv.FormatInt(d, 10))
}

func testCleanupBoundary(t *testing.T, h InboxHarness) {
	e := newInboxEnv(t, h)
	ctx := context.Background()
	const ttl = time.Hour
	const consumer = "ttl"
	in := e.newInbox(t, inbox.Config{Consumer: consumer, TTL: ttl})
	old, young, fresh := txbox.NewID(), txbox.NewID(), txbox.NewID()
	extra := newIDs(4)
	for _, id := range append([]txbox.ID{old, young, fresh}, extra...) {
		if r, err := in.Handle(ctx, inbox.Message{ID: id}, e.handler(consumer)); err != nil || r != inbox.Processed {
			t.Fatalf("Handle: %v %v", r, err)
		}
	}
	// One second on either side of the edge: the database clock moves
	// during the test, so a closer margin would make the test flaky, not
	// stricter.
	e.h.AgeInbox(t, e.ns, consumer, old, ttl+time.Second)
	e.h.AgeInbox(t, e.ns, consumer, young, ttl-time.Second)
	for _, id := range extra {
		e.h.AgeInbox(t, e.ns, consumer, id, 2*ttl)
	}
	// Bounded: Limit caps one call.
	n, err := e.st.InboxCleanup(ctx, &store.CleanupParams{OlderThan: ttl, Limit: 3})
	if err != nil || n != 3 {
		t.Fatalf("InboxCleanup(limit 3) = %d, %v; want 3", n, err)
	}
	n, err = e.st.InboxCleanup(ctx, &store.CleanupParams{OlderThan: ttl, Limit: 100})
	if err != nil || n != 2 {
		t.Fatalf("second InboxCleanup = %d, %v; want the remaining 2", n, err)
	}
	if n := e.h.CountInbox(t, e.ns, consumer); n != 2 {
		t.Errorf("inbox rows left = %d, want 2 (young, fresh)", n)
	}
	// An expired id is processed again; a young one is still a duplicate.
	if r, err := in.Handle(ctx, inbox.Message{ID: old}, e.handler(consumer)); err != nil || r != inbox.Processed {
		t.Errorf("expired id: %v, %v; want processed", r, err)
	}
	if r, err := in.Handle(ctx, inbox.Message{ID: young}, e.handler(consumer)); err != nil || r != inbox.Duplicate {
		t.Errorf("young id: %v, %v; want duplicate", r, err)
	}
	if _, err := e.st.InboxCleanup(ctx, &store.CleanupParams{OlderThan: ttl, Limit: 0}); err == nil {
		t.Error("InboxCleanup with limit 0: want an error")
	}
}

func testCleanerLease(t *testing.T, h InboxHarness) {
	e := newInboxEnv(t, h)
	ctx := context.Background()
	const consumer = "cleaner"
	in := e.newInbox(t, inbox.Config{Consumer: consumer})
	batch := newIDs(7)
	for _, id := range batch {
		if r, err := in.Handle(ctx, inbox.Message{ID: id}, e.handler(consumer)); err != nil || r != inbox.Processed {
			t.Fatalf("Handle: %v %v", r, err)
		}
		e.h.AgeInbox(t, e.ns, consumer, id, 48*time.Hour)
	}
	mk := func(holder string) *inbox.Cleaner {
		c, err := inbox.NewCleaner(e.st, e.st, inbox.CleanerConfig{Holder: holder, BatchSize: 2, LeaseName: "inboxtest-cleanup", MinDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := mk("a"), mk("b")
	n, held, err := a.RunOnce(ctx)
	if err != nil || !held || n != 7 {
		t.Fatalf("a.RunOnce = %d, %v, %v; want 7 deleted in bounded batches under the lease", n, held, err)
	}
	// b cannot run while a holds the lease.
	n, held, err = b.RunOnce(ctx)
	if err != nil || held || n != 0 {
		t.Fatalf("b.RunOnce = %d, %v, %v; want lease not held", n, held, err)
	}
	// a runs in the background, deletes newly expired ids, and releases
	// the lease on Stop so b can take over.
	late := txbox.NewID()
	if _, err := in.Handle(ctx, inbox.Message{ID: late}, e.handler(consumer)); err != nil {
		t.Fatal(err)
	}
	e.h.AgeInbox(t, e.ns, consumer, late, 48*time.Hour)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for e.h.CountInbox(t, e.ns, consumer) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("background cleaner did not delete the expired id within 30s")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not waiting for luck
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.Stop(stopCtx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := a.Start(ctx); !errors.Is(err, txbox.ErrClosed) {
		t.Errorf("Start after Stop = %v, want ErrClosed", err)
	}
	if _, held, err := b.RunOnce(ctx); err != nil || !held {
		t.Errorf("b.RunOnce after a stopped = held %v, %v; want the lease", held, err)
	}
}

// testConcurrentBatches has workers deliver overlapping batches (windows
// over one id list, in opposite directions) at once: every id has exactly
// one effect, and no worker fails (no lock-order deadlock).
func testConcurrentBatches(t *testing.T, e *inboxEnv) {
	const consumer = "batches"
	const n, window, workers = 40, 10, 6
	all := newIDs(n)
	in := e.newInbox(t, inbox.Config{Consumer: consumer})
	h := func(ctx context.Context, tx any, ms []inbox.Message) error {
		for _, m := range ms {
			if err := e.h.InsertEffect(ctx, tx, e.ns, consumer, m.ID); err != nil {
				return err
			}
		}
		return nil
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	var processed atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i+window <= n; i += window / 2 {
				batch := make([]inbox.Message, 0, window)
				for j := 0; j < window; j++ {
					k := i + j
					if w%2 == 1 {
						k = n - 1 - k
					}
					batch = append(batch, inbox.Message{ID: all[k]})
				}
				results, err := in.HandleBatch(context.Background(), batch, h)
				if err != nil {
					t.Errorf("worker %d: HandleBatch: %v", w, err)
					return
				}
				for _, r := range results {
					if r == inbox.Processed {
						processed.Add(1)
					}
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if got := processed.Load(); got != n {
		t.Errorf("processed = %d, want %d", got, n)
	}
	want := map[txbox.ID]int{}
	for _, id := range all {
		want[id] = 1
	}
	e.expectEffects(t, consumer, want)
}

// testHandleInTx: the caller's own transaction records the id with the
// effect; its rollback forgets both, its commit keeps both.
func testHandleInTx(t *testing.T, e *inboxEnv) {
	const consumer = "callertx"
	in := e.newInbox(t, inbox.Config{Consumer: consumer})
	ctx := context.Background()
	id := txbox.NewID()
	for _, commit := range []bool{false, true} {
		tx, err := e.st.InboxBegin(ctx) // stands for the caller's transaction
		if err != nil {
			t.Fatal(err)
		}
		r, err := in.HandleInTx(ctx, tx.Native(), inbox.Message{ID: id}, e.handler(consumer))
		if err != nil || r != inbox.Processed {
			t.Fatalf("HandleInTx (commit=%v) = %v, %v; want processed", commit, r, err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	e.expectEffects(t, consumer, map[txbox.ID]int{id: 1})
	tx, err := e.st.InboxBegin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if r, err := in.HandleInTx(ctx, tx.Native(), inbox.Message{ID: id}, e.handler(consumer)); err != nil || r != inbox.Duplicate {
		t.Errorf("after commit: %v, %v; want duplicate", r, err)
	}
	if _, err := in.HandleInTx(ctx, nil, inbox.Message{ID: id}, e.handler(consumer)); !errors.Is(err, txbox.ErrNoTransaction) {
		t.Errorf("nil tx: %v; want ErrNoTransaction", err)
	}
}
