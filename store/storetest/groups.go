package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// testDeadLetterGroups: dead letters are fingerprinted once, a batch at a
// time; errors that differ only in their variable parts share a group;
// the groups list largest first with a cursor, counted per status; the
// group filter selects exactly a group's dead letters; a dead letter that
// fails again is fingerprinted again.
func testDeadLetterGroups(t *testing.T, e *env) {
	const typ = "grouped"
	unknown, down, unsendable := e.groupedDeadLetters(typ)
	gs := e.groups(store.DeadLetterGroupsParams{Limit: 10})
	if len(gs) != 3 {
		t.Fatalf("%d groups, want 3: %+v", len(gs), gs)
	}
	checkGroups(t, e, typ, gs, [][]txbox.ID{unknown, down, unsendable})
	checkGroupPages(t, e, gs)

	// Counted per status.
	if _, err := e.d.DeadLetterResolve(e.ctx, unknown[:1]); err != nil {
		t.Fatal(err)
	}
	unres := e.groups(store.DeadLetterGroupsParams{Status: store.DeadLetterUnresolved, Limit: 10})
	res := e.groups(store.DeadLetterGroupsParams{Status: store.DeadLetterResolved, Limit: 10})
	if len(unres) != 3 || unres[0].Count != 2 || len(res) != 1 || res[0].Count != 1 || res[0].SampleID != unknown[0] {
		t.Errorf("by status: unresolved %+v, resolved %+v", unres, res)
	}

	// Retried and failed again: a new failure, fingerprinted again.
	if n, err := e.d.DeadLetterRetry(e.ctx, down[:1]); err != nil || n != 1 {
		t.Fatalf("retry: %d, %v", n, err)
	}
	rows := e.claim(typ, 1, longLease)
	e.finishAll(rows, store.OutcomeFailed, 0, "HTTP 410 Gone")
	if n := e.moveAll(); n != 1 {
		t.Fatalf("moved %d, want 1", n)
	}
	if n, err := e.d.DeadLetterFingerprint(e.ctx, &store.DeadLetterFingerprintParams{Limit: 100}); err != nil || n != 1 {
		t.Fatalf("fingerprint after a new failure: %d, %v; want 1", n, err)
	}
	checkGroupBadParams(t, e)
}

// groupedDeadLetters makes dead letters of three causes, checks that none
// is in a group before it is fingerprinted, and fingerprints them, a
// batch at a time.
func (e *env) groupedDeadLetters(typ string) (unknown, down, unsendable []txbox.ID) {
	t := e.t
	t.Helper()
	for _, n := range []string{"1234", "98", "7"} {
		unknown = append(unknown, e.deadLetter(typ, "", "HTTP 422 Unprocessable Entity: order "+n+" unknown"))
	}
	for _, addr := range []string{"10.0.0.1:8080", "10.0.0.2:9090"} {
		down = append(down, e.deadLetter(typ, "", "dial tcp "+addr+": connection refused"))
	}
	unsendable = append(unsendable, e.deadLetter(typ, "", store.NotSentPrefix+"the row cannot be turned into a message: headers"))

	if gs := e.groups(store.DeadLetterGroupsParams{Limit: 10}); len(gs) != 0 {
		t.Fatalf("groups before any fingerprint: %d, want none", len(gs))
	}
	print := func(in *store.FingerprintInput) store.Fingerprint {
		return store.NewFingerprint("webhook:orders", in.EventType, store.FailureClassOf(in.LastError, in.Attempts, 5), in.LastError)
	}
	n1, err := e.d.DeadLetterFingerprint(e.ctx, &store.DeadLetterFingerprintParams{Limit: 2, Print: print})
	if err != nil || n1 != 2 {
		t.Fatalf("fingerprint with Limit 2: %d, %v; want 2", n1, err)
	}
	n2, err := e.d.DeadLetterFingerprint(e.ctx, &store.DeadLetterFingerprintParams{Limit: 100, Print: print})
	if err != nil || n2 != 4 {
		t.Fatalf("fingerprint of the rest: %d, %v; want 4", n2, err)
	}
	if n, err := e.d.DeadLetterFingerprint(e.ctx, &store.DeadLetterFingerprintParams{Limit: 100, Print: print}); err != nil || n != 0 {
		t.Fatalf("fingerprint again: %d, %v; want 0 (each dead letter once)", n, err)
	}
	return unknown, down, unsendable
}

// checkGroups checks the three groups of groupedDeadLetters, largest
// first, and that the group filter walks exactly each one's dead letters.
func checkGroups(t *testing.T, e *env, typ string, gs []*store.DeadLetterGroup, ids [][]txbox.ID) {
	t.Helper()
	want := []struct {
		ids          []txbox.ID
		class, title string
	}{
		{ids[0], store.FailurePermanent, "HTTP 422 Unprocessable Entity: order <n> unknown"},
		{ids[1], store.FailurePermanent, "dial tcp <addr>: connection refused"},
		{ids[2], store.FailureUndecodable, store.NotSentPrefix + "the row cannot be turned into a message: headers"},
	}
	for i, w := range want {
		g := gs[i]
		if g.Count != int64(len(w.ids)) || g.Class != w.class || g.Message != w.title || g.EventType != typ || g.Destination != "webhook:orders" {
			t.Errorf("group %d = %+v, want count %d, class %s, message %q", i, g, len(w.ids), w.class, w.title)
		}
		if newest := e.newestDeadLetter(w.ids); g.SampleID != newest {
			t.Errorf("group %d sample = %s, want the newest dead letter %s", i, g.SampleID, newest)
		}
		if g.FirstFailedAt.After(g.LastFailedAt) || g.SampleError == "" || !store.ValidFingerprintKey(g.Fingerprint) {
			t.Errorf("group %d: first %s after last %s, sample error %q, key %q", i, g.FirstFailedAt, g.LastFailedAt, g.SampleError, g.Fingerprint)
		}
		var got []txbox.ID
		_, err := store.DeadLetterWalk(e.ctx, e.d, &store.DeadLetterWalkParams{Filter: store.DeadLetterFilter{Group: g.Fingerprint}, PageSize: 2},
			func(page []store.DeadLetterEntry) error {
				for _, en := range page {
					got = append(got, en.ID)
				}
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		if !sameIDs(got, w.ids) {
			t.Errorf("group %d filter walked %v, want %v", i, got, w.ids)
		}
	}
}

// checkGroupPages: pages of one group, from the cursor, list the same
// groups as one page.
func checkGroupPages(t *testing.T, e *env, gs []*store.DeadLetterGroup) {
	t.Helper()
	var paged []string
	var after *store.DeadLetterGroupCursor
	for range 5 {
		page := e.groups(store.DeadLetterGroupsParams{Limit: 1, After: after})
		if len(page) == 0 {
			break
		}
		paged = append(paged, page[0].Fingerprint)
		after = page[0].Cursor()
	}
	if !slices.Equal(paged, []string{gs[0].Fingerprint, gs[1].Fingerprint, gs[2].Fingerprint}) {
		t.Errorf("paged groups %v, want %v", paged, []string{gs[0].Fingerprint, gs[1].Fingerprint, gs[2].Fingerprint})
	}
}

// checkGroupBadParams: bad parameters are refused, never run.
func checkGroupBadParams(t *testing.T, e *env) {
	t.Helper()
	for name, p := range map[string]store.DeadLetterGroupsParams{
		"limit 0":         {},
		"limit too large": {Limit: store.MaxGroupsPage + 1},
		"bad status":      {Limit: 1, Status: "DONE"},
		"bad cursor":      {Limit: 1, After: &store.DeadLetterGroupCursor{Count: 1, Fingerprint: "x'; DROP TABLE"}},
	} {
		if _, err := e.d.DeadLetterGroups(e.ctx, &p); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("groups with %s: %v, want ErrInvalidParams", name, err)
		}
	}
	if _, err := e.d.DeadLetterCount(e.ctx, &store.DeadLetterFilter{Group: "NOT-A-KEY"}); !errors.Is(err, store.ErrInvalidParams) {
		t.Errorf("count with a bad group: %v, want ErrInvalidParams", err)
	}
	if _, err := e.d.DeadLetterFingerprint(e.ctx, &store.DeadLetterFingerprintParams{}); !errors.Is(err, store.ErrInvalidParams) {
		t.Errorf("fingerprint with Limit 0: %v, want ErrInvalidParams", err)
	}
}

func (e *env) groups(p store.DeadLetterGroupsParams) []*store.DeadLetterGroup {
	e.t.Helper()
	gs, err := e.d.DeadLetterGroups(e.ctx, &p)
	if err != nil {
		e.t.Fatalf("dead-letter groups: %v", err)
	}
	return gs
}

// newestDeadLetter returns the dead letter among ids that lists first
// (failed_at desc, id desc).
func (e *env) newestDeadLetter(ids []txbox.ID) txbox.ID {
	e.t.Helper()
	dls, err := e.d.DeadLetterList(e.ctx, &store.DeadLetterListParams{Filter: store.DeadLetterFilter{IDs: ids}, Limit: 1})
	if err != nil || len(dls) != 1 {
		e.t.Fatalf("newest of %v: %v, %v", ids, dls, err)
	}
	return dls[0].ID
}

// sameIDs reports whether a and b hold the same ids, in any order.
func sameIDs(a, b []txbox.ID) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	cmp := func(x, y txbox.ID) int { return slices.Compare(x[:], y[:]) }
	slices.SortFunc(a, cmp)
	slices.SortFunc(b, cmp)
	return slices.Equal(a, b)
}

// testDeadLetterActionsConcurrent: clients resolving, then retrying,
// overlapping pages of the same dead letters at once, each page in its
// own order and of its own size, never deadlock and never change a dead
// letter twice: what they changed adds up to the dead letters there were.
// The ids are random (version 4), so their order is not the table's: a
// statement that locked in its plan's order (an index scan in id order,
// a bitmap or sequential scan in heap order, chosen by the number of ids)
// could take two rows in one order while another took them in the other.
func testDeadLetterActionsConcurrent(t *testing.T, e *env) {
	const total, clients = 200, 4
	evs := events("concurrent-actions", total)
	ids := make([]txbox.ID, total)
	for i, ev := range evs {
		ev.ID = txbox.ID(uuid.New())
		ids[i] = ev.ID
	}
	e.publish(evs...)
	e.finishAll(e.claim("concurrent-actions", total, longLease), store.OutcomeFailed, 0, "boom")
	if n := e.moveAll(); n != total {
		t.Fatalf("moved %d, want %d", n, total)
	}
	for _, action := range []struct {
		name string
		fn   func(context.Context, []txbox.ID) (int, error)
	}{{"resolve", e.d.DeadLetterResolve}, {"retry", e.d.DeadLetterRetry}} {
		var changed atomic.Int64
		together(t, clients, func(c int) error {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for round := range 6 {
				page := slices.Clone(ids)
				rng.Shuffle(len(page), func(i, j int) { page[i], page[j] = page[j], page[i] })
				page = page[:1+rng.IntN(total)]
				if round == 5 {
					page = slices.Clone(ids) // the last round leaves none behind
				}
				n, err := action.fn(e.ctx, page)
				if err != nil {
					return fmt.Errorf("%s of %d ids: %w", action.name, len(page), err)
				}
				changed.Add(int64(n))
			}
			return nil
		})
		if got := changed.Load(); got != total {
			t.Fatalf("%s: the clients changed %d in all, want %d", action.name, got, total)
		}
	}
	if n, err := e.d.DeadLetterCount(e.ctx, nil); err != nil || n != 0 {
		t.Fatalf("%d dead letters left after the retries (%v)", n, err)
	}
}
