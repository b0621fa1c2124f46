package pgcluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/txbox/txbox/internal/pgcluster"
	"github.com/txbox/txbox/internal/testenv"
)

// TestMain fails the package when a goroutine outlives the tests: every
// node's admin pools and process waits end with its clean-up.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// eachVersion runs test as a parallel subtest per installed version.
func eachVersion(t *testing.T, test func(t *testing.T, v pgcluster.Version)) {
	for _, v := range pgcluster.Versions {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			test(t, v)
		})
	}
}

// TestPrimary: a primary of the version asked for, ready for WAL mode:
// wal_level = logical, replication connections, and a pgoutput slot that
// decodes a committed insert (the binaries ship pgoutput.so).
func TestPrimary(t *testing.T) {
	t.Parallel()
	eachVersion(t, func(t *testing.T, v pgcluster.Version) {
		p := pgcluster.Start(t, v, pgcluster.Options{})
		var num int
		var level string
		p.QueryRow(t, "test", `SELECT current_setting('server_version_num')::int, current_setting('wal_level')`, nil, &num, &level)
		if num/10000 != int(v) || level != "logical" {
			t.Fatalf("server_version_num %d, wal_level %s: want %d, logical", num, level, v)
		}
		p.Exec(t, "test", `CREATE TABLE t (id int PRIMARY KEY)`)
		p.Exec(t, "test", `CREATE PUBLICATION p FOR TABLE t`)
		p.Exec(t, "test", `SELECT pg_create_logical_replication_slot('s', 'pgoutput')`)
		p.Exec(t, "test", `INSERT INTO t VALUES (1)`)
		if n := pgoutputChanges(t, p, "s", false); n < 3 { // begin, relation, insert, commit
			t.Fatalf("pgoutput decoded %d messages of the insert", n)
		}
		// A replication connection (the walsender protocol WAL mode uses).
		replicationExec(t, p, "IDENTIFY_SYSTEM")
	})
}

// pgoutputChanges reads (get) or peeks at slot's pending pgoutput
// messages for publication p on n's database test and returns how many
// there are.
func pgoutputChanges(t *testing.T, n *pgcluster.Node, slot string, get bool) int {
	t.Helper()
	fn := "pg_logical_slot_peek_binary_changes"
	if get {
		fn = "pg_logical_slot_get_binary_changes"
	}
	var count int
	n.QueryRow(t, "test", `SELECT count(*) FROM `+fn+`($1, NULL, NULL, 'proto_version', '1', 'publication_names', 'p')`,
		[]any{slot}, &count)
	return count
}

// TestFailover: a primary with a synchronous standby; a committed row is
// on the standby; the primary is killed with SIGKILL and the standby
// promoted; the row is there, the new primary takes writes, and a
// multi-host DSN finds whichever node is the primary.
func TestFailover(t *testing.T) {
	t.Parallel()
	eachVersion(t, func(t *testing.T, v pgcluster.Version) {
		p := pgcluster.Start(t, v, pgcluster.Options{})
		s := pgcluster.AddStandby(t, p, pgcluster.StandbyOptions{Synchronous: true})
		var syncState string
		p.QueryRow(t, "postgres", `SELECT sync_state FROM pg_stat_replication WHERE application_name = $1`, []any{s.Name}, &syncState)
		if syncState != "sync" {
			t.Fatalf("%s's sync_state is %q, want sync", s.Name, syncState)
		}
		dsn := pgcluster.MultiHostDSN("test", s, p) // the standby first
		if got := serverPort(t, dsn); got != p.Port() {
			t.Fatalf("the multi-host DSN reached port %d, want the primary's %d", got, p.Port())
		}
		p.Exec(t, "test", `CREATE TABLE t (id int PRIMARY KEY)`)
		p.Exec(t, "test", `INSERT INTO t VALUES (1)`)
		pgcluster.WaitCaughtUp(t, p, s)
		if n := count(t, s); n != 1 {
			t.Fatalf("the standby has %d rows, want 1", n)
		}
		p.Exec(t, "test", `INSERT INTO t VALUES (2)`) // committed once the standby flushed it
		p.Kill(t)
		start := time.Now()
		pgcluster.Promote(t, s)
		t.Logf("%v: promoted in %v", v, time.Since(start))
		if n := count(t, s); n != 2 {
			t.Fatalf("the promoted standby has %d rows, want 2", n)
		}
		s.Exec(t, "test", `INSERT INTO t VALUES (3)`)
		if got := serverPort(t, dsn); got != s.Port() {
			t.Fatalf("after the failover the multi-host DSN reached port %d, want the new primary's %d", got, s.Port())
		}
	})
}

// count returns how many rows n's table t has.
func count(t *testing.T, n *pgcluster.Node) int {
	t.Helper()
	var c int
	n.QueryRow(t, "test", `SELECT count(*) FROM t`, nil, &c)
	return c
}

// serverPort connects with dsn and returns the port of the server it
// reached, which must accept writes.
func serverPort(t *testing.T, dsn string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgcluster.WaitTimeout)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect with %s: %v", dsn, err)
	}
	defer c.Close(ctx)
	var recovering bool
	if err := c.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&recovering); err != nil || recovering {
		t.Fatalf("%s reached a server in recovery (%v)", dsn, err)
	}
	return c.PgConn().Conn().RemoteAddr().(*net.TCPAddr).Port
}

// TestFailoverSlot: a logical slot with failover = true on the primary
// is copied to a standby set up for it (sync_replication_slots,
// synchronized_standby_slots); after a SIGKILL of the primary and a
// promotion it is on the new primary and decodes what was committed
// before and after the failover.
//
// Two ways to get there, timed in the log:
//   - made with failover = true on an idle primary, the standby's copy is
//     persistent (temporary = false) from its first sync, within about
//     0.5s;
//   - made without, written past, then altered (ALTER_REPLICATION_SLOT
//     ... (FAILOVER true), what txbox migrate's slots need today), the
//     copy is temporary, unusable and dropped at a promotion, until the
//     primary's slot has moved past the standby's catalog xmin and a
//     running-xacts record: pg_log_standby_snapshot() and a slot advance
//     on the primary every 100ms persist it within about a second.
//     TestFailoverSlotUnaided measures it without pg_log_standby_snapshot.
func TestFailoverSlot(t *testing.T) {
	t.Parallel()
	for _, alter := range []bool{false, true} {
		name := "created"
		if alter {
			name = "altered"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			eachVersion(t, func(t *testing.T, v pgcluster.Version) {
				p, s := failoverPair(t, v)
				syncSlot(t, p, s, alter, true)
				p.Exec(t, "test", `INSERT INTO t VALUES (1)`)
				pgcluster.WaitCaughtUp(t, p, s)
				p.Kill(t)
				pgcluster.Promote(t, s)
				got := s.Slot(t, "s")
				if !got.Exists || got.Temporary || !got.Failover {
					t.Fatalf("after the promotion the slot is %+v", got)
				}
				s.Exec(t, "test", `INSERT INTO t VALUES (2)`)
				// Two transactions: begin, relation, insert, commit each
				// (the second's relation message may be left out).
				if msgs := pgoutputChanges(t, s, "s", true); msgs < 7 {
					t.Fatalf("the slot on the new primary decoded %d messages, want both inserts", msgs)
				}
			})
		})
	}
}

// TestFailoverSlotUnaided measures how long an altered failover slot's
// copy stays temporary when its consumer confirms all the time (a
// streaming relay: the slot advanced every 200ms) but nobody calls
// pg_log_standby_snapshot(): the running-xacts record then comes from
// the background writer, every 15s at most while there is activity.
//
// Measured (2 cores, 17.10 and 18.4, twice): the copy showed within 0.4s,
// temporary, and was persisted after 25.8s on both versions, every run.
// That is the slot sync worker's nap, which doubles from 0.2s while no
// slot is updated (0.2 + 0.4 + ... + 12.8 = 25.4s), waking after the
// background writer's record. The issue measured about 52s under load.
func TestFailoverSlotUnaided(t *testing.T) {
	t.Parallel()
	if !testenv.Chaos(t, "a measurement of up to minutes") {
		return
	}
	eachVersion(t, func(t *testing.T, v pgcluster.Version) {
		p, s := failoverPair(t, v)
		syncSlot(t, p, s, true, false)
	})
}

// failoverPair starts a primary of v with a synchronous standby set up
// for failover slots, a table t and a publication p of it in database
// test.
func failoverPair(t *testing.T, v pgcluster.Version) (p, s *pgcluster.Node) {
	t.Helper()
	p = pgcluster.Start(t, v, pgcluster.Options{})
	s = pgcluster.AddStandby(t, p, pgcluster.StandbyOptions{Synchronous: true, FailoverSlots: true})
	p.Exec(t, "test", `CREATE TABLE t (id int PRIMARY KEY)`)
	p.Exec(t, "test", `CREATE PUBLICATION p FOR TABLE t`)
	return p, s
}

// syncSlot makes the pgoutput slot s on p a failover slot, at once or
// (alter) after transactions it has not decoded, and waits until s's copy
// on the standby is persistent, advancing the slot on p as a consumer
// would and, with nudge, logging a running-xacts record each time. It
// logs how long each step took.
func syncSlot(t *testing.T, p, s *pgcluster.Node, alter, nudge bool) {
	t.Helper()
	start := time.Now()
	// (slot_name, plugin, temporary, twophase, failover)
	p.Exec(t, "test", `SELECT pg_create_logical_replication_slot('s', 'pgoutput', false, false, $1)`, !alter)
	if alter {
		for i := 0; i < 5; i++ {
			p.Exec(t, "test", `CREATE TABLE IF NOT EXISTS pad (n int); INSERT INTO pad VALUES (1)`)
		}
		replicationExec(t, p, `ALTER_REPLICATION_SLOT s ( FAILOVER true )`)
	}
	if !p.Slot(t, "s").Failover {
		t.Fatal("the primary's slot is not a failover slot")
	}
	testenv.WaitForEvery(t, pgcluster.WaitTimeout, 20*time.Millisecond, "the slot synced to the standby", func() bool {
		return s.Slot(t, "s").Synced
	})
	seen, temporary := time.Since(start), s.Slot(t, "s").Temporary
	timeout := pgcluster.WaitTimeout
	if !nudge {
		timeout = 3 * time.Minute
	}
	testenv.WaitForEvery(t, timeout, 100*time.Millisecond, "the standby's copy persisted", func() bool {
		if nudge {
			p.Exec(t, "test", `SELECT pg_log_standby_snapshot()`)
		}
		p.Exec(t, "test", `SELECT pg_replication_slot_advance('s', pg_current_wal_lsn())`)
		return !s.Slot(t, "s").Temporary
	})
	t.Logf("%v, slot %s, nudged %v: on the standby after %v (temporary: %v), persisted after %v",
		p.Version, map[bool]string{false: "created failover", true: "altered to failover"}[alter], nudge,
		seen.Round(time.Millisecond), temporary, time.Since(start).Round(time.Millisecond))
}

// replicationExec runs a replication command on a walsender connection to
// n's database test.
func replicationExec(t *testing.T, n *pgcluster.Node, cmd string) {
	t.Helper()
	cfg, err := pgx.ParseConfig(n.DSN("test"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["replication"] = "database"
	ctx, cancel := context.WithTimeout(context.Background(), pgcluster.WaitTimeout)
	defer cancel()
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("replication connection: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.PgConn().Exec(ctx, cmd).ReadAll(); err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
}

// TestKilledTestLeavesNothing: a test process killed with SIGKILL takes
// its servers with it (their parent-death signal), and the next process
// to start a server removes what it left.
func TestKilledTestLeavesNothing(t *testing.T) {
	t.Parallel()
	child := testenv.StartTestProcess(t, "TestHelperServer", "PGCLUSTER_HELPER=1")
	var line string
	buf := make([]byte, 4096)
	for !strings.Contains(line, "\n") {
		n, err := child.Stdout.Read(buf)
		if err != nil {
			_ = child.Cmd.Wait()
			t.Fatalf("the helper said %q, then %v; stderr:\n%s", line, err, child.Stderr)
		}
		line += string(buf[:n])
	}
	dataDir := strings.TrimSpace(strings.TrimPrefix(strings.SplitN(line, "\n", 2)[0], "data "))
	if !pgcluster.Running(dataDir) {
		t.Fatalf("no server runs on %s", dataDir)
	}
	_ = child.Cmd.Process.Kill()
	_ = child.Cmd.Wait()
	testenv.WaitFor(t, 10*time.Second, "the killed test's server gone", func() bool { return !pgcluster.Running(dataDir) })
	pgcluster.RemoveStale()
	if _, err := os.Stat(dataDir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s is still there", dataDir)
	}
}

// TestHelperServer is TestKilledTestLeavesNothing's child: it starts a
// primary, prints its data directory and waits to be killed.
func TestHelperServer(t *testing.T) {
	if os.Getenv("PGCLUSTER_HELPER") == "" {
		return
	}
	p := pgcluster.Start(t, pgcluster.V17, pgcluster.Options{})
	fmt.Println("data " + p.DataDir())
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent kills it
}
