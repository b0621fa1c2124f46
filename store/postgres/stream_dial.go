package postgres

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// liveDial wraps the replication connection's DialFunc (the pool's, which
// may be the user's own) so that a TCP connection notices a dead peer
// within about timeout, the sender timeout, whatever the stream does:
// keepalive probes while nothing is in flight, and on Linux
// TCP_USER_TIMEOUT for data sent and not acknowledged (the status
// updates), which keepalive does not cover. A connection that is not
// TCP (a Unix socket, a user's tunnel) is left as it is.
func liveDial(dial pgconn.DialFunc, timeout time.Duration) pgconn.DialFunc {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	ka := keepAliveConfig(timeout)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc, ok := conn.(*net.TCPConn)
		if !ok {
			return conn, nil
		}
		if err := tc.SetKeepAliveConfig(ka); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("TCP keepalive: %w", err)
		}
		if err := setUserTimeout(tc, timeout); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("TCP_USER_TIMEOUT: %w", err)
		}
		return conn, nil
	}
}

// keepAliveConfig probes after half of timeout idle, then every tenth of
// it (at least a second, the kernel's unit), as many times as fit in the
// other half: the probes give up after about timeout.
func keepAliveConfig(timeout time.Duration) net.KeepAliveConfig {
	idle := max(timeout/2, time.Second)
	interval := max(timeout/10, time.Second)
	count := max(1, int((timeout-idle+interval-1)/interval))
	return net.KeepAliveConfig{Enable: true, Idle: idle, Interval: interval, Count: count}
}
