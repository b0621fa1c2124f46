package rabbitmq_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/consume/rabbitmq"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/internal/testenv"
)

// rest reads what is left in q with a plain amqp091 consumer until want
// deliveries arrived, acking each, and returns them.
func rest(t *testing.T, conn *amqp.Connection, q string, want int) []amqp.Delivery {
	t.Helper()
	ch := channel(t, conn)
	ds, err := ch.Consume(q, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []amqp.Delivery
	deadline := time.After(30 * time.Second)
	for len(out) < want {
		select {
		case d := <-ds:
			out = append(out, d)
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			t.Fatalf("only %d of %d deliveries left in the queue", len(out), want)
		}
	}
	return out
}

func eventID(t *testing.T, d amqp.Delivery) txbox.ID {
	t.Helper()
	s, _ := d.Headers[txbox.HeaderEventID].(string)
	id, err := txbox.ParseID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestStopDrainsInFlight: Run's context ends while 4 handlers run. Run
// cancels the broker consumer, waits for the 4 to finish (they commit),
// acks them and returns. What is left in the queue holds none of them and
// nothing flagged redelivered: the prefetch (= Concurrency) held nothing
// beyond the running handlers. Before this change the 4 were cancelled
// mid-transaction and came back, with 32 prefetched deliveries flagged
// redelivered.
func TestStopDrainsInFlight(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	q := queue(t, conn)
	pub := channel(t, conn)
	p := consumetest.NewPipeline(t, "rabbit-drain")
	const n, conc = 40, 4
	for i := 0; i < n; i++ {
		publish(t, pub, q, txbox.NewID(), true)
	}
	hold := consumetest.NewHold(p.Handler, n)
	cons, err := rabbitmq.New(channel(t, conn), rabbitmq.Config{Inbox: p.Inbox, Handler: hold.Handler, Queue: q, Concurrency: conc})
	if err != nil {
		t.Fatal(err)
	}
	_, cancel, done := consumetest.Run(cons.Run)
	ids := map[txbox.ID]bool{}
	for len(ids) < conc {
		ids[<-hold.Started] = true
	}
	cancel()
	hold.Release()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	finished := hold.Finished()
	for id := range ids {
		if err, ok := finished[id]; !ok || err != nil {
			t.Errorf("handler of %s: finished %v, err %v; want finished without error before Run returned", id, ok, err)
		}
	}
	if s := cons.Stats(); s.Acked != conc {
		t.Errorf("stats %+v; want the %d started deliveries acked", s, conc)
	}
	left := rest(t, conn, q, n-conc)
	redelivered := 0
	for _, d := range left {
		if ids[eventID(t, d)] {
			t.Errorf("started event %s is back in the queue", eventID(t, d))
		}
		if d.Redelivered {
			redelivered++
		}
	}
	if redelivered != 0 {
		t.Errorf("%d deliveries left flagged redelivered; want 0 (nothing prefetched beyond the handlers)", redelivered)
	}
}

// TestLostConnectionStrandsOnlyInFlight: a consumer whose connection dies
// (as in a crash) while a slow handler runs strands only what it held:
// with the default prefetch (= Concurrency, 1) one delivery comes back
// flagged redelivered. Before this change (prefetch 32) 32 did.
func TestLostConnectionStrandsOnlyInFlight(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	q := queue(t, conn)
	pub := channel(t, conn)
	env := consumetest.New(t, "rabbit-kill")
	const n = 100
	for i := 0; i < n; i++ {
		publish(t, pub, q, txbox.NewID(), true)
	}
	victim, err := amqp.Dial(testenv.RabbitURL)
	if err != nil {
		t.Fatal(err)
	}
	vch, err := victim.Channel()
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	inHandler := make(chan struct{})
	h := func(ctx context.Context, tx any, m inbox.Message) error {
		if calls.Add(1) == 5 {
			close(inHandler)
			<-ctx.Done() // the fifth never finishes: the process "dies" under it
			return ctx.Err()
		}
		return env.Handler(ctx, tx, m)
	}
	cons, err := rabbitmq.New(vch, rabbitmq.Config{Inbox: env.Inbox, Handler: h, Queue: q, DrainTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, cancel, done := consumetest.Run(cons.Run)
	defer cancel()
	<-inHandler
	_ = victim.Close()
	cancel()
	<-done
	redelivered := 0
	for _, d := range rest(t, conn, q, n-4) {
		if d.Redelivered {
			redelivered++
		}
	}
	if redelivered != 1 {
		t.Errorf("%d deliveries came back redelivered, want 1 (the one in the handler)", redelivered)
	}
}

// TestDeliveryCount: the handler sees the delivery metadata. A quorum
// queue counts deliveries (x-delivery-count); a classic queue only flags
// redeliveries, so their Count is 0 (unknown).
func TestDeliveryCount(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	for _, tc := range []struct {
		kind  string
		args  amqp.Table
		count []int
	}{
		{"classic", nil, []int{1, 0, 0}},
		{"quorum", amqp.Table{"x-queue-type": "quorum"}, []int{1, 2, 3}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			q := testenv.UniqueName("txbox_count_")
			ch := channel(t, conn)
			if _, err := ch.QueueDeclare(q, true, false, false, false, tc.args); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = channel(t, conn).QueueDelete(q, false, false, false) })
			env := consumetest.New(t, "rabbit-count")
			id := txbox.NewID()
			env.FailFirst(id, 2)
			publish(t, ch, q, id, true)
			cons, err := rabbitmq.New(channel(t, conn), rabbitmq.Config{Inbox: env.Inbox, Handler: env.Handler, Queue: q,
				Backoff: consume.Backoff{Min: time.Millisecond, Max: time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			_, cancel, done := consumetest.Run(cons.Run)
			env.WaitEffects(t, []txbox.ID{id}, 30*time.Second)
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v", err)
			}
			ds := env.Deliveries(id)
			if len(ds) != 3 {
				t.Fatalf("deliveries %+v, want 3", ds)
			}
			for i, d := range ds {
				if d.Broker != "rabbitmq" || d.Source != q || d.Count != tc.count[i] || d.Redelivered != (i > 0) || d.DeliveryTag == 0 {
					t.Errorf("delivery %d = %+v; want count %d, redelivered %v", i+1, d, tc.count[i], i > 0)
				}
			}
		})
	}
}

// TestLostEffectIsAcked: in non-transactional mode a handler that fails
// after the id was recorded has lost its effect (inbox.Lost); the adapter
// acks the delivery instead of requeueing it for a duplicate.
func TestLostEffectIsAcked(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	q := queue(t, conn)
	pub := channel(t, conn)
	env := consumetest.New(t, "rabbit-lost")
	in, err := inbox.New(env.Store, inbox.Config{Consumer: "rabbit-lost", Mode: inbox.NonTransactional})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	cons, err := rabbitmq.New(channel(t, conn), rabbitmq.Config{Inbox: in, Queue: q, Handler: func(context.Context, any, inbox.Message) error {
		calls.Add(1)
		return errors.New("smtp down")
	}})
	if err != nil {
		t.Fatal(err)
	}
	publish(t, pub, q, txbox.NewID(), true)
	_, cancel, done := consumetest.Run(cons.Run)
	testenv.WaitFor(t, 30*time.Second, "the delivery to be settled", func() bool { return cons.Stats().Acked+cons.Stats().Nacked > 0 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	if s := cons.Stats(); s.Acked != 1 || s.Nacked != 0 || calls.Load() != 1 {
		t.Errorf("stats %+v, %d handler calls; want the delivery acked after one call", s, calls.Load())
	}
}
