//go:build !linux

package postgres

import (
	"net"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist: the
// stream's read deadline and TCP keepalive remain.
func setUserTimeout(*net.TCPConn, time.Duration) error { return nil }
