package inboxprom_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/inbox/inboxprom"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store/sqlite"
)

func TestMetricsThroughAnInbox(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "m.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := inboxprom.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	lru, _ := inbox.NewLRU(10, time.Hour)
	in, err := inbox.New(st, inbox.Config{Consumer: "ship", Cache: lru, Hook: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ok := func(context.Context, any, inbox.Message) error { return nil }
	id := txbox.NewID()
	_, _ = in.Handle(ctx, inbox.Message{ID: id, Delivery: inbox.Delivery{Count: 1}}, ok)
	_, _ = in.Handle(ctx, inbox.Message{ID: id, Delivery: inbox.Delivery{Count: 2}}, ok)
	_, _ = in.Handle(ctx, inbox.Message{ID: txbox.NewID(), Delivery: inbox.Delivery{Redelivered: true}}, ok)
	amo, err := inbox.New(st, inbox.Config{Consumer: "mail", Mode: inbox.NonTransactional, Hook: m})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = amo.Handle(ctx, inbox.Message{ID: txbox.NewID()}, func(context.Context, any, inbox.Message) error { return context.DeadlineExceeded })
	for i := 0; i < 3; i++ {
		if _, err := in.Handle(ctx, inbox.Message{ID: txbox.NewID()}, ok); err != nil {
			t.Fatal(err)
		}
	}
	cleaner, err := inbox.NewCleaner(st, st, inbox.CleanerConfig{TTL: time.Nanosecond, Hook: m})
	if err != nil {
		t.Fatal(err)
	}
	deleted := 0
	testenv.WaitFor(t, 10*time.Second, "cleanup to delete every id", func() bool {
		n, _, err := cleaner.RunOnce(ctx)
		deleted += n
		return err == nil && deleted == 6
	})
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range mm.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			got[key] = mm.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		"txbox_inbox_messages_total,consumer=ship,result=processed":    5,
		"txbox_inbox_messages_total,consumer=ship,result=duplicate":    1,
		"txbox_inbox_messages_total,consumer=mail,result=lost":         1,
		"txbox_inbox_redelivered_total,consumer=ship,result=duplicate": 1,
		"txbox_inbox_redelivered_total,consumer=ship,result=processed": 1,
		"txbox_inbox_cache_lookups_total,consumer=ship,result=hit":     1,
		"txbox_inbox_cache_lookups_total,consumer=ship,result=miss":    5,
		"txbox_inbox_cleanup_deleted_total":                            6,
		"txbox_inbox_cleanup_errors_total":                             0,
	}
	if len(got) != len(want) {
		t.Errorf("got %d series, want %d: %v", len(got), len(want), got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}
