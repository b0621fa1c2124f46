package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// process is a running postmaster.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it exited
	err  error         // its exit status, once done is closed
}

// env is the servers' environment: nothing of the test's (no PG*
// variables), a UTF-8 locale and UTC.
var env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "TZ=UTC"}

// command returns name (a binary of the node's version) with args, run by
// the servers' user.
func (n *Node) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(n.bin, name), args...)
	cmd.Dir = n.dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: n.owner.cred,
		// Its own process group: a ^C to the test does not reach it, and
		// the harness can tell when its backends are gone.
		Setpgid: true,
		// It dies with the test process, clean-ups or not.
		Pdeathsig: syscall.SIGKILL,
	}
	return cmd
}

// initdb creates the node's data directory: superuser postgres, trust
// authentication, UTF-8 in the C.UTF-8 locale as the system server has.
func (n *Node) initdb(ctx context.Context) error {
	cmd := n.command("initdb", "-D", n.DataDir(), "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C.UTF-8", "--no-sync")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgcluster: initdb %v: %v\n%s", n.Version, err, out)
	}
	hba := strings.Join([]string{
		"# written by internal/pgcluster: trust on loopback, replication included",
		"local all all trust", "local replication all trust",
		"host all all 127.0.0.1/32 trust", "host all all ::1/128 trust",
		"host replication all 127.0.0.1/32 trust", "host replication all ::1/128 trust", "",
	}, "\n")
	if err := n.writeFile("data/pg_hba.conf", hba); err != nil {
		return err
	}
	// The node's own settings go to a file of their own, rewritten and
	// reloaded as standbys come and go (writeConf).
	f, err := os.OpenFile(filepath.Join(n.DataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	_, err = f.WriteString("\ninclude_if_exists = '" + nodeConf + "'\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// nodeConf is the file, in the data directory, of the node's settings.
const nodeConf = "txbox-node.conf"

// writeFile writes content to rel (a path in the node's directory),
// owned by the servers' user.
func (n *Node) writeFile(rel, content string) error {
	p := filepath.Join(n.dir, rel)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	return n.owner.chown(p)
}

// baseSettings are every node's settings before Options.Settings:
// loopback only, WAL mode's needs (wal_level = logical, slots,
// walsenders), a standby that reports back (hot_standby_feedback) and
// retries its primary every 0.5s, as much as the system server allows
// for connections and slots.
func (n *Node) baseSettings() map[string]string {
	fsync := "off"
	if n.opts.Durable {
		fsync = "on"
	}
	return map[string]string{
		"listen_addresses":        "127.0.0.1",
		"port":                    strconv.Itoa(n.Port()),
		"unix_socket_directories": n.dir,
		"wal_level":               "logical",
		"max_wal_senders":         "64",
		"max_replication_slots":   "64",
		"max_connections":         "100",
		"shared_buffers":          "32MB",
		"hot_standby":             "on",
		"hot_standby_feedback":    "on",
		"fsync":                   fsync,
		// A promotion that comes while the startup process waits to
		// retry its lost primary (wal_retrieve_retry_interval, 5s by
		// default) waits that out: seen on 17 and 18 in about one
		// promotion out of three right after a SIGKILL of the primary.
		"wal_retrieve_retry_interval": "500ms",
		"log_line_prefix":             "%m [%p] " + n.Name + " ",
	}
}

// settings returns the node's settings: the base, the options', then
// those of its place in the cluster (replicationSettings).
func (n *Node) settings() map[string]string {
	s := n.baseSettings()
	for k, v := range n.opts.Settings {
		s[k] = v
	}
	for k, v := range n.replicationSettings() {
		s[k] = v
	}
	return s
}

// writeConf writes the node's settings to nodeConf.
func (n *Node) writeConf() error {
	s := n.settings()
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString("# written by internal/pgcluster for " + n.Name + "\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = '%s'\n", k, strings.ReplaceAll(s[k], "'", "''"))
	}
	return n.writeFile("data/"+nodeConf, b.String())
}

// start starts the postmaster and waits until it accepts connections. A
// node keeps its port across restarts (a standby's primary_conninfo and
// a client's DSN name it); the first start finds a free one. Another
// process may take that port between the harness finding it free and
// the server binding it: then the start tries another.
func (n *Node) start(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		n.mu.Lock()
		fresh := n.port == 0
		n.mu.Unlock()
		if fresh {
			port, err := freePort()
			if err != nil {
				return err
			}
			n.mu.Lock()
			n.port = port
			n.mu.Unlock()
		}
		err := n.startOnce(ctx)
		if !fresh || !errors.Is(err, errPortTaken) || attempt == 4 {
			return err
		}
		n.mu.Lock()
		n.port = 0
		n.mu.Unlock()
	}
}

var errPortTaken = errors.New("the port was taken")

// startOnce starts the postmaster on n.port.
func (n *Node) startOnce(ctx context.Context) error {
	if err := n.writeConf(); err != nil {
		return err
	}
	log, err := os.OpenFile(n.LogFile(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	defer log.Close()
	cmd := n.command("postgres", "-D", n.DataDir())
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgcluster: start %s: %w", n.Name, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	n.mu.Lock()
	n.proc = p
	n.mu.Unlock()
	return n.waitReady(ctx, p)
}

// waitReady polls the server until it accepts a connection, its process
// exits, or ctx ends.
func (n *Node) waitReady(ctx context.Context, p *process) error {
	for {
		c, err := pgconn.Connect(ctx, n.DSN("postgres")+"&connect_timeout=2")
		if err == nil {
			_ = c.Close(ctx)
			return nil
		}
		select {
		case <-p.done:
			tail := n.logTail(20)
			if strings.Contains(tail, "could not bind") || strings.Contains(tail, "Address already in use") {
				return errPortTaken
			}
			return fmt.Errorf("pgcluster: %s (%v) exited at start (%v); its log ends:\n%s", n.Name, n.Version, p.err, tail)
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: %s (%v) did not accept connections: %v (last: %v); its log ends:\n%s", n.Name, n.Version, ctx.Err(), err, n.logTail(20))
		case <-time.After(20 * time.Millisecond): // polling with ctx's deadline
		}
	}
}

// freePort returns a TCP port of 127.0.0.1 that nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// running returns the node's process, or nil when it is not running.
func (n *Node) running() *process {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return nil
	}
	select {
	case <-n.proc.done:
		return nil
	default:
		return n.proc
	}
}

// stop asks the postmaster for a fast shutdown and waits up to timeout
// for it and its backends, then kills them.
func (n *Node) stop(timeout time.Duration) error {
	p := n.running()
	if p == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
		waitServerGone(n.DataDir(), 5*time.Second)
		return nil
	case <-time.After(timeout):
	}
	n.kill()
	return fmt.Errorf("pgcluster: %s did not shut down within %v; killed it", n.Name, timeout)
}

// kill sends SIGKILL to the postmaster and waits until its backends,
// which exit once they see it gone, are gone too.
func (n *Node) kill() {
	p := n.running()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	waitServerGone(n.DataDir(), 5*time.Second)
}

// waitServerGone waits until no process of the server on data is left,
// for up to timeout, then kills what is left. Each backend is a process
// group of its own (PostgreSQL calls setsid in every child), so they are
// found by their working directory, which is data.
func waitServerGone(data string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		pids := serverPIDs(data)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(10 * time.Millisecond) // polling the kernel with a deadline
	}
}

// logTail returns the last lines of the server's log.
func (n *Node) logTail(lines int) string {
	b, err := os.ReadFile(n.LogFile())
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// pool returns the node's small admin pool on database, opened on first
// use and closed when the node stops or is killed.
func (n *Node) pool(ctx context.Context, database string) (*pgxpool.Pool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p, ok := n.pools[database]; ok {
		return p, nil
	}
	cfg, err := pgxpool.ParseConfig(n.dsnLocked(database) + "&connect_timeout=5")
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 4
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	n.pools[database] = p
	return p, nil
}

func (n *Node) dsnLocked(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", n.port, url.PathEscape(database))
}

// closePools closes the admin pools, whose connections a stop or a crash
// ends anyway.
func (n *Node) closePools() {
	n.mu.Lock()
	pools := n.pools
	n.pools = map[string]*pgxpool.Pool{}
	n.mu.Unlock()
	for _, p := range pools {
		p.Close()
	}
}

// exec runs sql on database through the admin pool.
func (n *Node) exec(ctx context.Context, database, sql string, args ...any) (pgconn.CommandTag, error) {
	p, err := n.pool(ctx, database)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return p.Exec(ctx, sql, args...)
}

// queryRow runs a one-row query on database through the admin pool and
// scans it into dest.
func (n *Node) queryRow(ctx context.Context, database, sql string, args []any, dest ...any) error {
	p, err := n.pool(ctx, database)
	if err != nil {
		return err
	}
	return p.QueryRow(ctx, sql, args...).Scan(dest...)
}

// Exec runs sql on database or fails the test.
func (n *Node) Exec(t testing.TB, database, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	if _, err := n.exec(ctx, database, sql, args...); err != nil {
		t.Fatalf("pgcluster: %s: %s: %v", n.Name, sql, err)
	}
}

// QueryRow runs a one-row query on database and scans the row into dest,
// or fails the test.
func (n *Node) QueryRow(t testing.TB, database, sql string, args []any, dest ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	if err := n.queryRow(ctx, database, sql, args, dest...); err != nil {
		t.Fatalf("pgcluster: %s: %s: %v", n.Name, sql, err)
	}
}

// Conn opens a connection to database on the node, closed when the test
// ends.
func (n *Node) Conn(t testing.TB, database string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	c, err := pgx.Connect(ctx, n.DSN(database))
	if err != nil {
		t.Fatalf("pgcluster: connect to %s: %v", n.Name, err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}
