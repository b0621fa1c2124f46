package sendertest

import (
	"context"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
)

// WaitRecovered probes with probe, as the relay probes a paused
// destination with small batches, until one succeeds. Every failure
// meanwhile must be transient: a sender that reconnects must not turn an
// outage into rejections. It fails t when no probe succeeded within
// within; each new error is logged, so the last one is in the report.
func WaitRecovered(t testing.TB, within time.Duration, probe func() error) {
	t.Helper()
	last := ""
	// Every 100ms: the relay's probe interval, shortened.
	testenv.WaitForEvery(t, within, 100*time.Millisecond, "the sender to recover (a probe Send to succeed)", func() bool {
		err := probe()
		if err == nil {
			return true
		}
		if c := txbox.Classify(err); c != txbox.ClassTransient {
			t.Fatalf("sendertest: while recovering, error classified %v, want transient: %v", c, err)
		}
		if msg := err.Error(); msg != last {
			t.Logf("sendertest: still recovering: %v", err)
			last = msg
		}
		return false
	})
}

// CheckHung checks a sender whose connection goes through f against a
// destination that stops answering without closing anything (a hung
// process, a network that drops packets): with f frozen, each of sends
// Sends of 20 messages must fail as transient within bound instead of
// hanging, and once f thaws the sender must recover within 30s. what
// names the destination in the report ("broker", "server"); newMessages
// builds n messages for its route.
func CheckHung(t *testing.T, s sender.Sender, f *Freezer, what string, sends int, bound time.Duration, newMessages func(n int) []*sender.Message) {
	t.Helper()
	f.Freeze()
	for i := 0; i < sends; i++ {
		start := time.Now()
		err := s.Send(context.Background(), newMessages(20))
		if err == nil || txbox.Classify(err) != txbox.ClassTransient {
			t.Fatalf("Send %d to a hung %s = %v, want transient", i, what, err)
		}
		t.Logf("Send %d to a hung %s: %v after %v", i, what, txbox.Classify(err), time.Since(start).Round(time.Millisecond))
		if d := time.Since(start); d > bound {
			t.Fatalf("Send %d to a hung %s took %v", i, what, d)
		}
	}
	f.Unfreeze()
	WaitRecovered(t, 30*time.Second, func() error { return s.Send(context.Background(), newMessages(1)) })
}
