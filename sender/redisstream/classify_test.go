package redisstream

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// replyError is an error reply as go-redis reports it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want txbox.ErrorClass
	}{
		{replyError("WRONGTYPE Operation against a key holding the wrong kind of value"), txbox.ClassRejected},
		{replyError("ERR Invalid stream ID specified as stream command argument"), txbox.ClassRejected},
		{replyError("OOM command not allowed when used memory > 'maxmemory'."), txbox.ClassTransient},
		{replyError("LOADING Redis is loading the dataset in memory"), txbox.ClassTransient},
		{replyError("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk"), txbox.ClassTransient},
		{replyError("READONLY You can't write against a read only replica."), txbox.ClassTransient},
		{replyError("NOAUTH Authentication required."), txbox.ClassTransient},
		{io.EOF, txbox.ClassTransient},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), txbox.ClassTransient},
	} {
		if got := txbox.Classify(classify(c.err)); got != c.want {
			t.Errorf("classify(%q) = %v, want %v", c.err, got, c.want)
		}
	}
	if classify(nil) != nil {
		t.Error("classify(nil) != nil")
	}
}

// TestConnectionLevel: only failures of the connection itself are marked
// Disconnected; a refusal of the command or a slow reply is not.
func TestConnectionLevel(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}
	readTimeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	dialTimeout := &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{refused, true}, {reset, true}, {dialTimeout, true}, {io.EOF, true},
		{&net.DNSError{Err: "no such host", Name: "redsi"}, true},
		{readTimeout, false}, {context.DeadlineExceeded, false},
		{replyError("LOADING Redis is loading the dataset in memory"), false},
		{replyError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
	} {
		if got := sender.IsDisconnected(classify(c.err)); got != c.want {
			t.Errorf("classify(%v) Disconnected = %v, want %v", c.err, got, c.want)
		}
	}
}
