package postgres

import (
	"context"
	"net"
	"testing"
	"time"
)

// TestKeepAliveConfig: the probes give up after about the sender timeout.
func TestKeepAliveConfig(t *testing.T) {
	for _, c := range []struct {
		timeout        time.Duration
		idle, interval time.Duration
		count          int
	}{
		{10 * time.Second, 5 * time.Second, time.Second, 5},
		{2 * time.Second, time.Second, time.Second, 1},
		{time.Minute, 30 * time.Second, 6 * time.Second, 5},
		{500 * time.Millisecond, time.Second, time.Second, 1},
	} {
		ka := keepAliveConfig(c.timeout)
		if !ka.Enable || ka.Idle != c.idle || ka.Interval != c.interval || ka.Count != c.count {
			t.Errorf("%s: %+v", c.timeout, ka)
		}
	}
}

// TestLiveDialKeepsDialFunc: liveDial dials with the DialFunc it wraps.
func TestLiveDialKeepsDialFunc(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	called := ""
	dial := liveDial(func(ctx context.Context, network, addr string) (net.Conn, error) {
		called = addr
		var d net.Dialer
		return d.DialContext(ctx, network, ln.Addr().String())
	}, DefaultSenderTimeout)
	conn, err := dial(context.Background(), "tcp", "elsewhere:5432")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if called != "elsewhere:5432" {
		t.Errorf("the wrapped DialFunc saw %q", called)
	}
	if conn.RemoteAddr().String() != ln.Addr().String() {
		t.Errorf("connected to %s", conn.RemoteAddr())
	}
}
