package testenv

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// TestCutProxy: while cut, nothing passes either way and neither end sees
// its peer close; once restored, the held bytes arrive, then the close.
func TestCutProxy(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serverConn := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		serverConn <- c
	}()
	p := StartCutProxy(t, ln.Addr().String())
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("one\n")); err != nil {
		t.Fatal(err)
	}
	s := <-serverConn
	defer s.Close()
	sr := bufio.NewReader(s)
	if line, err := sr.ReadString('\n'); err != nil || line != "one\n" {
		t.Fatalf("through the link: %q, %v", line, err)
	}

	p.Cut()
	if _, err := c.Write([]byte("two\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("reply\n")); err != nil {
		t.Fatal(err)
	}
	// The server ends the session during the cut.
	if err := s.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	// Neither the bytes nor the close reach the other end while cut.
	for _, r := range []net.Conn{c, s} {
		_ = r.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := r.Read(make([]byte, 16))
		if ne, ok := err.(net.Error); n != 0 || !ok || !ne.Timeout() {
			t.Fatalf("read through a cut link: %d bytes, %v; want a timeout", n, err)
		}
		_ = r.SetReadDeadline(time.Time{})
	}

	p.Restore()
	if line, err := sr.ReadString('\n'); err != nil || line != "two\n" {
		t.Fatalf("held client bytes after the link returned: %q, %v", line, err)
	}
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "reply\n" {
		t.Fatalf("held server bytes, then the close, after the link returned: %q, %v", b, err)
	}
}
