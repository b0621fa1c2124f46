package sendertest_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/sendertest"
	"github.com/txbox/txbox/sender/webhook"
)

// The suite is only worth something if it fails broken senders. Each case
// wraps the (conforming) webhook sender to break one promise, runs one
// check of the suite on it in a child process (a failing *testing.T
// cannot be observed from inside), and expects that check to fail with a
// given message.
var brokenCases = []struct {
	name, check, want string
}{
	{"serial", "Pipelined", "messages are not kept in flight"},
	{"drops-one", "DeliversBatch", "never arrived"},
	{"mutates", "DeliversBatch", "Send modified its messages"},
	{"swallows-rejections", "RejectsOneMessage", "want a *sender.BatchError"},
	{"outage-as-rejected", "Unreachable", "want transient"},
	{"ignores-context", "CancelStopsSend", "cancel"},
	{"close-is-noop", "CloseFlushes", "Send after Close"},
	{"marks-disconnected", "Disconnected", "but Features.MarksDisconnected is off"},
	{"claims-disconnects", "Disconnected", "is not marked sender.Disconnected"},
}

const brokenEnv = "SENDERTEST_BROKEN"

func TestSuiteFailsBrokenSenders(t *testing.T) {
	t.Parallel()
	for _, c := range brokenCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenSenderChild$/^"+c.check+"$", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+c.name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite's %s check passed a %s sender:\n%s", c.check, c.name, out)
			}
			if !strings.Contains(string(out), c.want) {
				t.Fatalf("the %s check failed a %s sender, but not with %q:\n%s", c.check, c.name, c.want, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestBrokenSenderChild/"+c.check) {
				t.Fatalf("the failure is not from the %s check:\n%s", c.check, out)
			}
		})
	}
}

// TestBrokenSenderChild is the child process of
// TestSuiteFailsBrokenSenders; run directly, it has nothing to do.
func TestBrokenSenderChild(t *testing.T) {
	mode := os.Getenv(brokenEnv)
	if mode == "" {
		return
	}
	sendertest.Exercise(t, sendertest.Harness{
		Features: sendertest.Features{SupportsPerMessageReject: true, SupportsKey: true, MarksDisconnected: mode == "claims-disconnects"},
		// A lost message is declared lost sooner: the receiver is local.
		DeliveryTimeout: 3 * time.Second,
		NewDestination: func(t *testing.T) *sendertest.Destination {
			r := newReceiver(t)
			return &sendertest.Destination{
				Addr: r.srv.Listener.Addr().String(),
				Connect: func(t *testing.T, addr string) (sender.Sender, sender.Route) {
					cfg := webhook.Config{}
					if mode == "serial" {
						cfg.MaxConcurrency = 1
					}
					s, err := webhook.New(cfg)
					if err != nil {
						t.Fatal(err)
					}
					return &broken{mode: mode, s: s}, sender.Route{URL: "http://" + addr + "/hook"}
				},
				Received: func(*testing.T) []sendertest.Delivery { return r.deliveries() },
				Poison: func(_ *testing.T, m *sender.Message) {
					r.mu.Lock()
					r.reject[m.ID.String()] = true
					r.mu.Unlock()
				},
			}
		},
	})
}

// broken breaks one promise of the sender it wraps.
type broken struct {
	mode string
	s    sender.Sender
}

func (b *broken) Send(ctx context.Context, msgs []*sender.Message) error {
	switch b.mode {
	case "drops-one":
		if len(msgs) > 1 {
			return b.s.Send(ctx, msgs[1:])
		}
	case "mutates":
		for _, m := range msgs {
			m.Headers["x-touched"] = "yes"
		}
	case "swallows-rejections":
		err := b.s.Send(ctx, msgs)
		var be *sender.BatchError
		if errors.As(err, &be) {
			return nil
		}
		return err
	case "outage-as-rejected":
		errs := sender.Results(b.s.Send(ctx, msgs), len(msgs))
		for i, err := range errs {
			if err != nil {
				errs[i] = txbox.Rejected(errors.New(err.Error()))
			}
		}
		return &sender.BatchError{Errs: errs}
	case "ignores-context":
		return b.s.Send(context.WithoutCancel(ctx), msgs)
	case "marks-disconnected":
		errs := sender.Results(b.s.Send(ctx, msgs), len(msgs))
		for i, err := range errs {
			errs[i] = sender.Disconnected(err)
		}
		return sender.Summarize(errs)
	}
	return b.s.Send(ctx, msgs)
}

func (b *broken) Close(ctx context.Context) error {
	if b.mode == "close-is-noop" {
		return nil
	}
	return b.s.Close(ctx)
}

type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []sendertest.Delivery
	reject map[string]bool
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{reject: map[string]bool{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		id := req.Header.Get(webhook.HeaderIdempotencyKey)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.reject[id] {
			w.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		h := map[string]string{}
		for k, vs := range req.Header {
			h[strings.ToLower(k)] = vs[0]
		}
		r.got = append(r.got, sendertest.Delivery{ID: id, Payload: body, Headers: h, Key: req.Header.Get(sender.HeaderKey)})
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) deliveries() []sendertest.Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sendertest.Delivery(nil), r.got...)
}
