package postgres

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/txbox/txbox/store"
)

// TestLiveDialSocketOptions reads back what liveDial sets on a TCP
// connection: keepalive on, its idle time, interval and count, and
// TCP_USER_TIMEOUT equal to the sender timeout.
func TestLiveDialSocketOptions(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conn, err := liveDial(nil, 10*time.Second)(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := tcpOptions(t, conn)
	want := map[string]int{"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": 5, "TCP_KEEPINTVL": 1, "TCP_KEEPCNT": 5, "TCP_USER_TIMEOUT": 10000}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
}

// tcpOptions reads the keepalive options and TCP_USER_TIMEOUT of conn.
func tcpOptions(t testing.TB, conn net.Conn) map[string]int {
	t.Helper()
	rc, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	opts := map[string][2]int{
		"SO_KEEPALIVE":     {unix.SOL_SOCKET, unix.SO_KEEPALIVE},
		"TCP_KEEPIDLE":     {unix.IPPROTO_TCP, unix.TCP_KEEPIDLE},
		"TCP_KEEPINTVL":    {unix.IPPROTO_TCP, unix.TCP_KEEPINTVL},
		"TCP_KEEPCNT":      {unix.IPPROTO_TCP, unix.TCP_KEEPCNT},
		"TCP_USER_TIMEOUT": {unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT},
	}
	got := map[string]int{}
	var gerr error
	err = rc.Control(func(fd uintptr) {
		for name, o := range opts {
			v, err := unix.GetsockoptInt(int(fd), o[0], o[1])
			if err != nil {
				gerr = err
				return
			}
			got[name] = v
		}
	})
	if err == nil {
		err = gerr
	}
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// StreamTCPOptions reads tcpOptions of an open stream's replication
// connection, for the external tests.
func StreamTCPOptions(t testing.TB, s store.Stream) map[string]int {
	t.Helper()
	return tcpOptions(t, s.(*pgStream).conn.Conn())
}
