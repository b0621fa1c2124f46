package inboxtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/store"
)

var errBoom = errors.New("inboxtest: handler failure")

// inboxEnv is the shared state of one Inbox run: most subtests share a
// namespace and isolate themselves by consumer name, because creating and
// migrating a namespace is the expensive part.
type inboxEnv struct {
	h  Harness
	ns string
	st Store
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

// expectOnceEach fails t unless processed, the Processed results of all
// the deliveries of ids to consumer, is one per id and each id has exactly
// one effect row: the end state of every concurrent test, whatever the
// interleaving.
func (e *inboxEnv) expectOnceEach(t testing.TB, consumer string, ids []txbox.ID, processed int64) {
	t.Helper()
	if processed != int64(len(ids)) {
		t.Errorf("processed = %d, want %d (one per id)", processed, len(ids))
	}
	e.expectEffects(t, consumer, onceEach(ids))
}

func newIDs(n int) []txbox.ID {
	out := make([]txbox.ID, n)
	for i := range out {
		out[i] = txbox.NewID()
	}
	return out
}

// onceEach is the effects of ids when each has exactly one.
func onceEach(ids []txbox.ID) map[txbox.ID]int {
	want := make(map[txbox.ID]int, len(ids))
	for _, id := range ids {
		want[id] = 1
	}
	return want
}

func newInboxEnv(t *testing.T, h Harness) *inboxEnv {
	t.Helper()
	ns, st := h.Setup(t)
	return &inboxEnv{h: h, ns: ns, st: st}
}

// ExerciseStore runs the store suite against the dialect behind h: its
// store.Inbox driven through the real inbox.Inbox and inbox.Cleaner. The
// calling package must also define TestInboxHelperProcess calling
// HelperProcess with an equivalent harness.
func ExerciseStore(t *testing.T, h Harness) {
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
	e.expectEffects(t, "batch", onceEach(all))
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
