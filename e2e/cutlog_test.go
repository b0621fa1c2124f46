package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
)

// The records a child relay keeps for a test that must know when it sent
// what and what its stream said (TestChaosNetworkCut*), and the parent's
// readers of them. The clocks of parent and child are the machine's wall
// clock, so the parent can compare a child's record with the moment it cut
// the link or saw another relay take the slot.

// sendLog passes sends on and appends each to a file: "S <unix ns> <seq>
// <id>,<id>,..." when the relay hands the batch to its sender (before a
// slow destination's delay), "E <unix ns> <seq> ok|err" when Send returns.
type sendLog struct {
	sender.Sender
	mu  sync.Mutex
	f   *os.File
	seq int64
}

func openSendLog(s sender.Sender, path string) (*sendLog, error) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	return &sendLog{Sender: s, f: f}, nil
}

func (l *sendLog) Send(ctx context.Context, msgs []*sender.Message) error {
	var b strings.Builder
	l.mu.Lock()
	l.seq++
	seq := l.seq
	fmt.Fprintf(&b, "S %d %d ", time.Now().UnixNano(), seq)
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(m.ID.String())
	}
	b.WriteByte('\n')
	l.write(b.String())
	l.mu.Unlock()
	err := l.Sender.Send(ctx, msgs)
	res := "ok"
	if err != nil {
		res = "err"
	}
	l.mu.Lock()
	l.write(fmt.Sprintf("E %d %d %s\n", time.Now().UnixNano(), seq, res))
	l.mu.Unlock()
	return err
}

// write appends one line; l.mu is held. A failed write is reported on
// stderr, where the parent test's output shows it.
func (l *sendLog) write(line string) {
	if _, err := l.f.WriteString(line); err != nil {
		fmt.Fprintln(os.Stderr, "child relay: send log:", err)
	}
}

func (l *sendLog) close() { _ = l.f.Close() }

// writeHealthLog appends "<unix ns> <stream state> <events held>" to path
// every 50ms until the returned stop is called; the state is "off" for a
// relay without a stream.
func writeHealthLog(r *relay.Relay, path string) (stop func(), err error) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			state, held := "off", 0
			if h := r.Health().Stream; h != nil {
				state, held = string(h.State), h.Held
				if state == "" {
					state = "off"
				}
			}
			if _, err := fmt.Fprintf(f, "%d %s %d\n", time.Now().UnixNano(), state, held); err != nil {
				fmt.Fprintln(os.Stderr, "child relay: health log:", err)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		_ = f.Close()
	}, nil
}

// logTail reads the lines appended to a file since its last read.
type logTail struct {
	path string
	off  int64
	rest []byte // an incomplete last line
}

// lines returns the complete lines appended since the last call (none
// while the file does not exist yet).
func (l *logTail) lines(t testing.TB) []string {
	t.Helper()
	f, err := os.Open(l.path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(l.off, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	l.off += int64(len(data))
	buf := append(l.rest, data...)
	i := bytes.LastIndexByte(buf, '\n')
	if i < 0 {
		l.rest = buf
		return nil
	}
	l.rest = append([]byte(nil), buf[i+1:]...)
	return strings.Split(string(buf[:i]), "\n")
}

// sendRec is one send of a child relay.
type sendRec struct {
	begun, ended time.Time // ended is zero while the send is under way
	ids          []txbox.ID
	failed       bool
}

// sendLogReader reads a child's send log (sendLog).
type sendLogReader struct {
	tail  logTail
	bySeq map[int64]*sendRec
	recs  []*sendRec // in the order they began
}

func newSendLogReader(path string) *sendLogReader {
	return &sendLogReader{tail: logTail{path: path}, bySeq: map[int64]*sendRec{}}
}

// read takes in what the child appended since the last read.
func (r *sendLogReader) read(t testing.TB) {
	t.Helper()
	for _, line := range r.tail.lines(t) {
		f := strings.Fields(line)
		if len(f) < 3 {
			t.Fatalf("send log %s: bad line %q", r.tail.path, line)
		}
		ns, err1 := strconv.ParseInt(f[1], 10, 64)
		seq, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("send log %s: bad line %q", r.tail.path, line)
		}
		at := time.Unix(0, ns)
		switch f[0] {
		case "S":
			rec := &sendRec{begun: at}
			if len(f) > 3 {
				for s := range strings.SplitSeq(f[3], ",") {
					id, err := txbox.ParseID(s)
					if err != nil {
						t.Fatalf("send log %s: %v", r.tail.path, err)
					}
					rec.ids = append(rec.ids, id)
				}
			}
			r.bySeq[seq] = rec
			r.recs = append(r.recs, rec)
		case "E":
			if rec := r.bySeq[seq]; rec != nil {
				rec.ended, rec.failed = at, len(f) > 3 && f[3] != "ok"
			}
		default:
			t.Fatalf("send log %s: bad line %q", r.tail.path, line)
		}
	}
}

// underWaySince reports whether a send that began after since has not
// ended yet.
func (r *sendLogReader) underWaySince(since time.Time) bool {
	for i := len(r.recs) - 1; i >= 0 && r.recs[i].begun.After(since); i-- {
		if r.recs[i].ended.IsZero() {
			return true
		}
	}
	return false
}

// between counts the sends that began in [from, to) and their events, and
// returns the last one's beginning.
func (r *sendLogReader) between(from, to time.Time) (sends, events int, last time.Time) {
	for _, rec := range r.recs {
		if !rec.begun.Before(from) && rec.begun.Before(to) {
			sends++
			events += len(rec.ids)
			last = rec.begun
		}
	}
	return sends, events, last
}

// idsBegunBefore returns the events of the sends that began before at.
func (r *sendLogReader) idsBegunBefore(at time.Time) []txbox.ID {
	var out []txbox.ID
	for _, rec := range r.recs {
		if rec.begun.Before(at) {
			out = append(out, rec.ids...)
		}
	}
	return out
}

// summary describes the sends read so far, for a diagnostic.
func (r *sendLogReader) summary() string {
	if len(r.recs) == 0 {
		return "no sends"
	}
	under := 0
	for _, rec := range r.recs {
		if rec.ended.IsZero() {
			under++
		}
	}
	last := r.recs[len(r.recs)-1]
	return fmt.Sprintf("%d sends, %d under way, the last began %s ago", len(r.recs), under, time.Since(last.begun).Round(time.Millisecond))
}

// healthRec is one line of a child's health log.
type healthRec struct {
	at    time.Time
	state string
	held  int
}

// healthLogReader reads a child's health log (writeHealthLog).
type healthLogReader struct {
	tail logTail
	recs []healthRec
}

func newHealthLogReader(path string) *healthLogReader {
	return &healthLogReader{tail: logTail{path: path}}
}

func (r *healthLogReader) read(t testing.TB) {
	t.Helper()
	for _, line := range r.tail.lines(t) {
		f := strings.Fields(line)
		var ns int64
		var held int
		var err error
		if len(f) == 3 {
			ns, err = strconv.ParseInt(f[0], 10, 64)
			if err == nil {
				held, err = strconv.Atoi(f[2])
			}
		}
		if len(f) != 3 || err != nil {
			t.Fatalf("health log %s: bad line %q", r.tail.path, line)
		}
		r.recs = append(r.recs, healthRec{at: time.Unix(0, ns), state: f[1], held: held})
	}
}

// last is the latest record read (zero before the first).
func (r *healthLogReader) last() healthRec {
	if len(r.recs) == 0 {
		return healthRec{}
	}
	return r.recs[len(r.recs)-1]
}

// firstOtherAfter returns the first record after at whose state is not
// state.
func (r *healthLogReader) firstOtherAfter(at time.Time, state string) (healthRec, bool) {
	for _, h := range r.recs {
		if h.at.After(at) && h.state != state {
			return h, true
		}
	}
	return healthRec{}, false
}

// postgresAddr is the host:port of the local PostgreSQL (testenv.PostgresURL).
func postgresAddr(t testing.TB) string {
	t.Helper()
	u, err := url.Parse(testenv.PostgresURL)
	if err != nil || u.Host == "" {
		t.Fatalf("no PostgreSQL host in %q: %v", testenv.PostgresURL, err)
	}
	return u.Host
}

// postgresVia is the environment entry that points a child relay's
// PostgreSQL connections, its pool and its replication connection alike,
// at addr (a testenv.CutProxy): testenv.PostgresURL with its host
// replaced, through the variable testenv reads it from. The child's other
// services stay direct.
func postgresVia(t testing.TB, addr string) string {
	t.Helper()
	u, err := url.Parse(testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return "TXBOX_TEST_POSTGRES_URL=" + u.String()
}
