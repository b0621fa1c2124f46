package pgcluster

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Version is a PostgreSQL major version that scripts/pg-versions.sh
// installs.
type Version int

// The installed versions.
const (
	// V14 is the oldest version table mode is tested on; WAL mode needs
	// 15+ (publication row filters) and refuses it.
	V14 Version = 14
	// V16 is the newest version without failover slots: WAL mode runs,
	// a promotion loses the slot (docs/operations.md, "Failover").
	V16 Version = 16
	V17 Version = 17
	V18 Version = 18
)

// Installed are the versions scripts/pg-versions.sh installs, oldest
// first: the version matrix (scripts/pg-matrix.sh) runs on them.
var Installed = []Version{V14, V16, V17, V18}

// Versions are the installed versions with failover slots (17+), oldest
// first: the failover tests run on each of them.
var Versions = []Version{V17, V18}

func (v Version) String() string { return "PostgreSQL " + strconv.Itoa(int(v)) }

// DefaultDatabases are the databases a primary gets besides postgres:
// "test", the one internal/testenv's URL names.
var DefaultDatabases = []string{"test"}

// Timeouts of the harness's waits. A server starts in about a second; the
// bounds are generous because the machine is shared with other runs.
const (
	// StartTimeout bounds a server's start (a standby's included: it
	// accepts connections once consistent).
	StartTimeout = 60 * time.Second
	// WaitTimeout bounds WaitCaughtUp, WaitPromoted and the like.
	WaitTimeout = 30 * time.Second
)

// Options configure a primary; its standbys copy them.
type Options struct {
	// Databases are created once the primary runs, besides postgres.
	// Defaults to DefaultDatabases.
	Databases []string
	// Settings are server settings (postgresql.conf name → value) that
	// replace or add to the harness's own (see baseSettings).
	// Defaults to none.
	Settings map[string]string
	// Durable turns fsync on. Defaults to false: a SIGKILL of the server
	// loses nothing that the kernel holds, and fsync only slows a shared
	// machine down.
	Durable bool
}

// Node is one running (or killed) PostgreSQL server of a test.
type Node struct {
	// Name names the node in logs and is a standby's application_name
	// ("primary", "standby1", ...).
	Name    string
	Version Version

	dir   string // the node's directory: data/, server.log, the socket
	bin   string
	owner owner
	opts  Options

	mu   sync.Mutex
	port int
	proc *process
	// A standby's replication settings; a primary's list of standbys.
	standby   *StandbyOptions
	upstream  *Node
	standbys  []*Node
	pools     map[string]*pgxpool.Pool
	standbyNo int
}

// Port returns the node's TCP port on 127.0.0.1.
func (n *Node) Port() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.port
}

// Addr returns the node's host:port.
func (n *Node) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port())) }

// DataDir returns the node's data directory.
func (n *Node) DataDir() string { return n.dir + "/data" }

// LogFile returns the path of the server's log.
func (n *Node) LogFile() string { return n.dir + "/server.log" }

// DSN returns a URL for database on the node, as the superuser postgres
// over TCP without TLS.
func (n *Node) DSN(database string) string {
	return "postgres://postgres@" + n.Addr() + "/" + url.PathEscape(database) + "?sslmode=disable"
}

// MultiHostDSN returns a URL for database that lists every node's
// address and asks for the one that accepts writes
// (target_session_attrs=read-write): what a client uses to follow the
// primary across a failover, as it would with the hosts of an HA pair.
func MultiHostDSN(database string, nodes ...*Node) string {
	hosts := make([]string, len(nodes))
	for i, n := range nodes {
		hosts[i] = n.Addr()
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/" + url.PathEscape(database) +
		"?sslmode=disable&target_session_attrs=read-write"
}

// Start starts a primary of version v for the test and returns it once it
// accepts connections; the test's clean-up stops it and removes its
// files, and logs the end of its log when the test failed. A missing
// binary or user fails the test with the command that installs it.
func Start(t testing.TB, v Version, opts Options) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	n, err := Launch(ctx, v, opts)
	if n != nil {
		cleanup(t, n)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// cleanup registers n's clean-up with t.
func cleanup(t testing.TB, n *Node) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgcluster: the end of %s's log (%s):\n%s", n.Name, n.LogFile(), n.logTail(40))
		}
		if err := n.Close(); err != nil {
			t.Errorf("pgcluster: %v", err)
		}
	})
}

// Launch is Start without a test: the caller must Close the node. A
// program that serves the version matrix (pgserve) uses it; on an
// error after the node's directory was made, it returns the node too, to
// be closed.
func Launch(ctx context.Context, v Version, opts Options) (*Node, error) {
	n, err := newNode(v, "primary", opts)
	if err != nil {
		return nil, err
	}
	if err := n.initdb(ctx); err != nil {
		return n, err
	}
	if err := n.start(ctx); err != nil {
		return n, err
	}
	dbs := opts.Databases
	if dbs == nil {
		dbs = DefaultDatabases
	}
	for _, db := range dbs {
		if _, err := n.exec(ctx, "postgres", "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
			return n, fmt.Errorf("pgcluster: create database %s: %w", db, err)
		}
	}
	return n, nil
}

// newNode makes the directory of a node named name.
func newNode(v Version, name string, opts Options) (*Node, error) {
	if !slices.Contains(Installed, v) {
		return nil, fmt.Errorf("pgcluster: %v is not installed (installed: %v)", v, Installed)
	}
	bin, err := binDir(v)
	if err != nil {
		return nil, err
	}
	o, err := serverOwner()
	if err != nil {
		return nil, err
	}
	pdir, err := processDirectory()
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	dir, err := os.MkdirTemp(pdir, name+"-")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	if err := o.chown(dir); err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	return &Node{Name: name, Version: v, dir: dir, bin: bin, owner: o, opts: opts, pools: map[string]*pgxpool.Pool{}}, nil
}

// Close stops the server (fast shutdown, then SIGKILL) and removes the
// node's files. Start's clean-up calls it.
func (n *Node) Close() error {
	n.closePools()
	err := n.stop(10 * time.Second)
	if rmErr := os.RemoveAll(n.dir); rmErr != nil && err == nil {
		err = rmErr
	}
	return err
}

// Stop shuts the server down (fast shutdown): its data stays, and Restart
// starts it again.
func (n *Node) Stop(t testing.TB) {
	t.Helper()
	n.closePools()
	if err := n.stop(WaitTimeout); err != nil {
		t.Fatal(err)
	}
}

// Kill sends SIGKILL to the postmaster, as `kill -9` does, and returns
// once it and its backends are gone: the crash of a primary. Its data
// stays; Restart runs crash recovery on it.
func (n *Node) Kill(t testing.TB) {
	t.Helper()
	n.closePools()
	n.kill()
}

// Restart starts the server again on its data (after Stop or Kill),
// stopping it first if it runs.
func (n *Node) Restart(t testing.TB) {
	t.Helper()
	n.closePools()
	if err := n.stop(WaitTimeout); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := n.start(ctx); err != nil {
		t.Fatal(err)
	}
}
