package redisstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/redisstream"
	"github.com/txbox/txbox/sender/sendertest"
)

// direct returns a client of the test's own, not through any proxy.
func direct(t *testing.T) *redis.Client {
	t.Helper()
	testenv.RequireTCP(t, "Redis", testenv.RedisAddr)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// newStream returns a unique stream name deleted when the test ends.
func newStream(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	name := testenv.UniqueName("txbox_stream_")
	t.Cleanup(func() { rdb.Del(context.Background(), name) })
	return name
}

func read(t *testing.T, rdb *redis.Client, stream string) []redis.XMessage {
	t.Helper()
	xs, err := rdb.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE: %v", err)
	}
	return xs
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sendertest.Exercise(t, sendertest.Harness{
		Features:         sendertest.Features{SupportsPerMessageReject: true, SupportsKey: true, MarksDisconnected: true},
		UnreachableBound: 10 * time.Second,
		NewDestination: func(t *testing.T) *sendertest.Destination {
			rdb := direct(t)
			stream := newStream(t, rdb)
			return &sendertest.Destination{
				Addr: testenv.RedisAddr,
				Connect: func(t *testing.T, addr string) (sender.Sender, sender.Route) {
					s, err := redisstream.New(redisstream.Config{Addr: addr, DialTimeout: time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second})
					if err != nil {
						t.Fatal(err)
					}
					return s, sender.Route{Stream: stream}
				},
				Received: func(t *testing.T) []sendertest.Delivery {
					var out []sendertest.Delivery
					for _, x := range read(t, rdb, stream) {
						h := map[string]string{}
						if err := json.Unmarshal([]byte(str(x.Values["headers"])), &h); err != nil {
							t.Fatalf("entry %s headers: %v", x.ID, err)
						}
						out = append(out, sendertest.Delivery{
							ID: str(x.Values["id"]), Payload: []byte(str(x.Values["payload"])),
							Headers: h, Key: str(x.Values["key"]),
						})
					}
					return out
				},
				// A key that holds a string: XADD to it fails with WRONGTYPE
				// for that message only.
				Poison: func(t *testing.T, m *sender.Message) {
					k := newStream(t, rdb)
					if err := rdb.Set(context.Background(), k, "not a stream", 0).Err(); err != nil {
						t.Fatal(err)
					}
					m.Route.Stream = k
				},
			}
		},
	})
}

func newSender(t *testing.T, cfg redisstream.Config) *redisstream.Sender {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = testenv.RedisAddr
	}
	s, err := redisstream.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func TestEntryFields(t *testing.T) {
	t.Parallel()
	rdb := direct(t)
	stream := newStream(t, rdb)
	s := newSender(t, redisstream.Config{})
	// Topic is the fallback when the route has no Stream.
	msgs := sendertest.NewMessages(2, sender.Route{Topic: stream})
	msgs[1].Key = ""
	msgs[1].Headers = nil
	if err := s.Send(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	xs := read(t, rdb, stream)
	if len(xs) != 2 {
		t.Fatalf("%d entries, want 2", len(xs))
	}
	for i, x := range xs {
		m := msgs[i]
		if str(x.Values["id"]) != m.ID.String() || str(x.Values["type"]) != m.EventType ||
			str(x.Values["key"]) != m.Key || str(x.Values["payload"]) != string(m.Payload) {
			t.Errorf("entry %d = %v", i, x.Values)
		}
		var h map[string]string
		if err := json.Unmarshal([]byte(str(x.Values["headers"])), &h); err != nil {
			t.Fatal(err)
		}
		if h[txbox.HeaderEventID] != m.ID.String() || h[txbox.HeaderEventType] != m.EventType || h[txbox.HeaderCreatedAt] == "" {
			t.Errorf("entry %d headers = %v", i, h)
		}
	}
}

func TestMaxLenTrims(t *testing.T) {
	t.Parallel()
	rdb := direct(t)
	stream := newStream(t, rdb)
	s := newSender(t, redisstream.Config{MaxLen: 10})
	for i := 0; i < 20; i++ {
		if err := s.Send(context.Background(), sendertest.NewMessages(100, sender.Route{Stream: stream})); err != nil {
			t.Fatal(err)
		}
	}
	// MAXLEN ~ trims whole radix-tree nodes (100 entries by default), so
	// the length stays near the limit rather than exactly at it.
	n, err := rdb.XLen(context.Background(), stream).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n > 300 {
		t.Fatalf("stream has %d entries after 2000 XADDs with MaxLen 10: not trimmed", n)
	}
}

func TestNoStreamIsRejected(t *testing.T) {
	t.Parallel()
	rdb := direct(t)
	stream := newStream(t, rdb)
	s := newSender(t, redisstream.Config{})
	msgs := sendertest.NewMessages(3, sender.Route{Stream: stream})
	msgs[1].Route = sender.Route{}
	errs := sender.Results(s.Send(context.Background(), msgs), 3)
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("good messages: %v", errs)
	}
	if !errors.Is(errs[1], redisstream.ErrNoStream) || txbox.Classify(errs[1]) != txbox.ClassRejected {
		t.Fatalf("message without stream: %v", errs[1])
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]redisstream.Config{
		"bad addr":     {Addr: "localhost"},
		"negative db":  {DB: -1},
		"negative max": {MaxLen: -5},
		"negative to":  {ReadTimeout: -time.Second},
	} {
		if _, err := redisstream.New(cfg); !errors.Is(err, redisstream.ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestUnreachableHidesPassword(t *testing.T) {
	t.Parallel()
	s := newSender(t, redisstream.Config{Addr: sendertest.ClosedAddr(t), Password: "hunter2", DialTimeout: 500 * time.Millisecond})
	err := s.Send(context.Background(), sendertest.NewMessages(2, sender.Route{Stream: "x"}))
	if txbox.Classify(err) != txbox.ClassTransient || !errors.Is(err, redisstream.ErrUnavailable) {
		t.Fatalf("Send = %v, want transient ErrUnavailable", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error leaks the password: %v", err)
	}
}

// TestHungServer: Redis stops answering without closing anything. Send
// reports transient within the read timeout and recovers afterwards.
func TestHungServer(t *testing.T) {
	t.Parallel()
	rdb := direct(t)
	stream := newStream(t, rdb)
	f := sendertest.NewFreezer(t, testenv.RedisAddr)
	s := newSender(t, redisstream.Config{Addr: f.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	route := sender.Route{Stream: stream}
	if err := s.Send(context.Background(), sendertest.NewMessages(5, route)); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	sendertest.CheckHung(t, s, f, "server", 2, 5*time.Second, func(n int) []*sender.Message { return sendertest.NewMessages(n, route) })
}

func TestNilMessageIsPermanentNotPanic(t *testing.T) {
	t.Parallel()
	rdb := direct(t)
	s := newSender(t, redisstream.Config{})
	msgs := sendertest.NewMessages(2, sender.Route{Stream: newStream(t, rdb)})
	errs := sender.Results(s.Send(context.Background(), []*sender.Message{msgs[0], nil, msgs[1]}), 3)
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], redisstream.ErrNilMessage) || txbox.Classify(errs[1]) != txbox.ClassPermanent {
		t.Fatalf("results = %v", errs)
	}
}

func TestDestinationIsTheStream(t *testing.T) {
	t.Parallel()
	s, err := redisstream.New(redisstream.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if got := sender.DestinationOf(s, sender.Route{Stream: "orders", Topic: "t", Subject: "x"}); got != "orders" {
		t.Fatalf("destination = %q, want the stream", got)
	}
	if got := sender.DestinationOf(s, sender.Route{Topic: "t"}); got != "t" {
		t.Fatalf("destination without a stream = %q, want the topic Send uses", got)
	}
}

func TestRefusedIsDisconnected(t *testing.T) {
	t.Parallel()
	s, err := redisstream.New(redisstream.Config{Addr: sendertest.ClosedAddr(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	msgs := sendertest.NewMessages(3, sender.Route{Stream: "s"})
	for i, err := range sender.Results(s.Send(context.Background(), msgs), len(msgs)) {
		if txbox.Classify(err) != txbox.ClassTransient || !sender.IsDisconnected(err) {
			t.Fatalf("message %d: %v, want transient and Disconnected", i, err)
		}
	}
}

// TestRefusedAuthIsNotAck: a user the server refuses (WRONGPASS) fails
// the pipeline while each command's own error stays nil; the batch must
// fail as transient and disconnected, never report the entries written.
func TestRefusedAuthIsNotAck(t *testing.T) {
	t.Parallel()
	rdb := direct(t)
	stream := newStream(t, rdb)
	s, err := redisstream.New(redisstream.Config{Addr: testenv.RedisAddr, Username: "txbox-no-such-user", Password: "refused-pw"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = s.Send(ctx, sendertest.NewMessages(3, sender.Route{Stream: stream}))
	if err == nil {
		t.Fatal("Send with a refused user reported every message written")
	}
	for i, e := range sender.Results(err, 3) {
		if txbox.Classify(e) != txbox.ClassTransient || !sender.IsDisconnected(e) {
			t.Errorf("message %d: %v (class %v), want transient and disconnected", i, e, txbox.Classify(e))
		}
	}
	if n := len(read(t, rdb, stream)); n != 0 {
		t.Fatalf("%d entries written", n)
	}
}

// TestCheckRoute: the server answers and accepts the user (streams need
// no set-up); a refused user is reported.
func TestCheckRoute(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "Redis", testenv.RedisAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ok, err := redisstream.New(redisstream.Config{Addr: testenv.RedisAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close(ctx)
	if err := ok.CheckRoute(ctx, sender.Route{Stream: "any"}); err != nil {
		t.Fatalf("CheckRoute: %v", err)
	}
	bad, err := redisstream.New(redisstream.Config{Addr: testenv.RedisAddr, Username: "txbox-no-such-user", Password: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close(ctx)
	if err := bad.CheckRoute(ctx, sender.Route{Stream: "any"}); err == nil {
		t.Fatal("CheckRoute with a refused user: nil")
	}
}
