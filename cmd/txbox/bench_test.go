package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/internal/testenv"
)

// TestBenchBadFlags: every mistake on the command line is a clear message
// and exit code 2, before anything is measured.
func TestBenchBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--scenario", "drian"}, `--scenario: unknown name "drian" (valid: publish, drain`},
		{[]string{"--scenario", ","}, "--scenario: name at least one"},
		{[]string{"--senders", "kafka,sqs"}, `--senders: unknown name "sqs"`},
		{[]string{"--dialects", "oracle"}, `--dialects: unknown name "oracle" (valid: postgres, mysql, sqlite, or all)`},
		{[]string{"--backlog", "0"}, "--backlog must be at least 100, not 0"},
		{[]string{"--backlog", "lots"}, `invalid value "lots" for flag -backlog`},
		{[]string{"--rate", "-5"}, "--rate must be at least 1"},
		{[]string{"--idle-window", "0s"}, "--idle-window must be > 0"},
		{[]string{"--xmin-hold", "10"}, `invalid value "10" for flag -xmin-hold`},
		{[]string{"--relays", "1,0"}, `--relays: "0" is not a process count`},
		{[]string{"--inbox-duplicates", "1.5"}, "--inbox-duplicates must be in [0, 1)"},
		{[]string{"--wal-backlogs", "200000,50"}, `--wal-backlogs: "50" is not a backlog between 100 and 50000000 rows`},
		{[]string{"--wal-rate", "0"}, "--wal-rate must be at least 1"},
		{[]string{"--dsn", "root@tcp(127.0.0.1:3306)/test"}, "--dsn must be a PostgreSQL URL"},
		{[]string{"--out", ""}, "--out must name a directory"},
		{[]string{"--no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		code, _, errOut := runInProcess(t, nil, append([]string{"bench"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("bench %v: code %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	code, _, errOut := runInProcess(t, nil, "bench", "--help")
	if code != exitOK || !strings.Contains(errOut, "--scenario") || !strings.Contains(errOut, "-watermill-bin binary") {
		t.Errorf("bench --help: code %d, stderr %q", code, errOut)
	}
}

// TestBenchQuick runs `txbox bench --quick` as a real process (its relay
// and naive-loop children are this test binary again) against the local
// PostgreSQL and NATS, with the watermill harness pointed at a directory
// that does not exist, and checks the results: JSON that parses with a
// positive finite ratio for every scenario, the harness reported as not
// available, Markdown with every scenario and the machine, and SVG charts
// that are well-formed XML. No speed is asserted.
func TestBenchQuick(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	testenv.RequireTCP(t, "NATS", strings.TrimPrefix(testenv.NATSURL, "nats://"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "results")
	scen := []string{"publish", "drain", "pickup", "idle", "watermill", "fanout", "tenants", "tenants-idle"}
	cmd, stdout, stderr := child(t, ctx, "bench", "--quick", "--scenario", strings.Join(scen, ","),
		"--dsn", testenv.PostgresURL, "--nats", testenv.NATSURL, "--out", out,
		"--watermill-dir", filepath.Join(t.TempDir(), "no-harness-here"))
	if err := cmd.Run(); err != nil {
		t.Fatalf("txbox bench --quick: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
	}
	if !strings.Contains(stderr.String(), "watermill: NOT AVAILABLE") {
		t.Errorf("stderr does not say the watermill harness is missing:\n%s", stderr)
	}

	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Quick     bool
		Machine   map[string]any
		Scenarios []struct {
			Name, Error, Unavailable string
			Ratios                   []struct {
				Name   string
				Median float64
				Values []float64
			}
			Runs []struct {
				Variant string
				Rate    float64
			}
		}
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("results.json: %v\n%s", err, raw)
	}
	if !rep.Quick || rep.Machine["cpu"] == "" || rep.Machine["postgresql"] == "" || rep.Machine["load_average_after"] == "" {
		t.Errorf("machine details missing: quick=%v %v", rep.Quick, rep.Machine)
	}
	if len(rep.Scenarios) != len(scen) {
		t.Fatalf("%d scenarios in results.json, want %d", len(rep.Scenarios), len(scen))
	}
	for i, s := range rep.Scenarios {
		if s.Name != scen[i] || s.Error != "" {
			t.Errorf("scenario %d: %q, error %q", i, s.Name, s.Error)
		}
		if len(s.Ratios) == 0 {
			t.Errorf("scenario %s has no ratio", s.Name)
		}
		for _, r := range s.Ratios {
			for _, v := range append([]float64{r.Median}, r.Values...) {
				if !(v > 0) || math.IsInf(v, 0) {
					t.Errorf("scenario %s ratio %q: value %v", s.Name, r.Name, v)
				}
			}
		}
		for _, r := range s.Runs {
			if !(r.Rate > 0) {
				t.Errorf("scenario %s run %s: rate %v", s.Name, r.Variant, r.Rate)
			}
		}
	}
	wm := ""
	for _, s := range rep.Scenarios {
		if s.Name == "watermill" {
			wm = s.Unavailable
		}
	}
	if !strings.Contains(wm, "no watermill harness module") {
		t.Errorf("watermill scenario does not say why the harness is unavailable: %q", wm)
	}
	// Defaults and tuned against the naive loop, kept rows against the
	// defaults, then the lease claim against the default lock claim
	// (PostgreSQL has both).
	if drain := rep.Scenarios[1]; len(drain.Ratios) != 4 || !strings.Contains(drain.Ratios[3].Name, "relay lease / relay default") {
		t.Errorf("drain ratios: %+v", drain.Ratios)
	}

	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range append([]string{"## Machine", "## Ratios", "load average before", "**Not available:**", "NaN"}, scen...) {
		has := strings.Contains(string(md), want)
		if has == (want == "NaN") {
			t.Errorf("results.md: contains %q = %v\n%s", want, has, md)
		}
	}

	svgs, _ := filepath.Glob(filepath.Join(out, "*.svg"))
	if len(svgs) < 5 {
		t.Errorf("%d SVG charts, want one per scenario and the latency chart: %v", len(svgs), svgs)
	}
	for _, p := range svgs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !wellFormedSVG(t, b) {
			t.Errorf("%s is not a well-formed SVG:\n%s", p, b)
		}
		if !strings.Contains(string(md), filepath.Base(p)) {
			t.Errorf("results.md does not show %s", filepath.Base(p))
		}
	}
	if !strings.Contains(stdout.String(), "results.json") {
		t.Errorf("stdout does not list the files written: %s", stdout)
	}
}

// TestBenchQuickDialects drains to NATS from MariaDB and SQLite, the
// relay and the naive loop each on its own table, and checks that both
// comparisons produce a ratio.
func TestBenchQuickDialects(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "MariaDB", "127.0.0.1:3306")
	testenv.RequireTCP(t, "NATS", strings.TrimPrefix(testenv.NATSURL, "nats://"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "results")
	profiles := filepath.Join(t.TempDir(), "profiles")
	cmd, stdout, stderr := child(t, ctx, "bench", "--quick", "--scenario", "drain", "--dialects", "mysql,sqlite", "--backlog", "500",
		"--dsn", testenv.PostgresURL, "--mysql-dsn", testenv.MySQLDSN, "--nats", testenv.NATSURL, "--out", out, "--profile-dir", profiles)
	if err := cmd.Run(); err != nil {
		t.Fatalf("txbox bench: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
	}
	// --profile-dir: every child, relay or naive loop, wrote its profile.
	for _, name := range []string{"mysql-to-nats-naive-loop", "mysql-to-nats-relay-default", "sqlite-to-nats-relay-tuned"} {
		if fi, err := os.Stat(filepath.Join(profiles, name+".pprof")); err != nil || fi.Size() == 0 {
			t.Errorf("--profile-dir: no profile %s.pprof (%v)", name, err)
		}
	}
	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Scenarios []struct {
			Error  string
			Ratios []struct {
				Name   string
				Median float64
			}
		}
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range rep.Scenarios[0].Ratios {
		if !(r.Median > 0) {
			t.Errorf("ratio %q: %v", r.Name, r.Median)
		}
		names = append(names, r.Name)
	}
	got := strings.Join(names, "; ")
	for _, want := range []string{"mysql → nats: relay default / naive loop", "mysql → nats: relay lease / relay default", "sqlite → nats: relay tuned / naive loop"} {
		if !strings.Contains(got, want) {
			t.Errorf("ratios %q lack %q (error %q)", got, want, rep.Scenarios[0].Error)
		}
	}
	// SQLite has no lock claim: no lock variant runs there.
	if strings.Contains(got, "sqlite → nats: relay lock") || strings.Contains(got, "sqlite → nats: relay lease") {
		t.Errorf("ratios %q have a lock claim on sqlite", got)
	}
}

// TestBenchQuickWAL runs the wal scenario small: WAL mode against the
// naive loop and the lock claim, drain and pickup, with CPU profiles. It
// checks every ratio and figure is there, that the WAL meter read both
// relays' production, and that the scenario left no slot or publication
// behind (one of a bench schema that no longer exists).
func TestBenchQuickWAL(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "PostgreSQL", testenv.PostgresAddr)
	testenv.RequireTCP(t, "NATS", strings.TrimPrefix(testenv.NATSURL, "nats://"))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "results")
	profiles := filepath.Join(t.TempDir(), "profiles")
	cmd, stdout, stderr := child(t, ctx, "bench", "--quick", "--scenario", "wal", "--wal-backlogs", "500", "--pickup-duration", "500ms",
		"--dsn", testenv.PostgresURL, "--nats", testenv.NATSURL, "--out", out, "--profile-dir", profiles)
	if err := cmd.Run(); err != nil {
		t.Fatalf("txbox bench: %v\nstdout: %s\nstderr: %s", err, stdout, stderr)
	}
	if fi, err := os.Stat(filepath.Join(profiles, "500-relay-WAL-mode.pprof")); err != nil || fi.Size() == 0 {
		t.Errorf("--profile-dir: no profile of the WAL mode relay (%v)", err)
	}
	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Scenarios []struct {
			Error  string
			Ratios []struct {
				Name   string
				Median float64
			}
			Runs []struct {
				Variant string
				Extra   map[string]float64
			}
			Latencies []struct {
				Name    string
				Samples int
			}
		}
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Scenarios) != 1 || rep.Scenarios[0].Error != "" {
		t.Fatalf("scenarios: %+v", rep.Scenarios)
	}
	s := rep.Scenarios[0]
	var names []string
	for _, r := range s.Ratios {
		if !(r.Median > 0) || math.IsInf(r.Median, 0) {
			t.Errorf("ratio %q: %v", r.Name, r.Median)
		}
		names = append(names, r.Name)
	}
	want := "500: WAL mode / naive loop; 500: WAL mode / lock claim; 500: WAL mode / naive loop, no database; 500: naive loop / naive loop, no database; " +
		"Go publisher, WAL mode: pickup p50 / 2 ms; pickup p50: WAL mode / lock claim"
	if got := strings.Join(names, "; "); got != want {
		t.Errorf("ratios %q, want %q", got, want)
	}
	for _, r := range s.Runs {
		relay := strings.Contains(r.Variant, "relay")
		if got := r.Extra["wal_produce_bytes_per_event"]; relay != (got > 0) {
			t.Errorf("run %s: WAL produced %v bytes/event", r.Variant, got)
		}
		if !(r.Extra["max_rss_mib"] > 0) {
			t.Errorf("run %s: no peak RSS", r.Variant)
		}
	}
	if len(s.Latencies) != 4 {
		t.Errorf("latencies: %+v", s.Latencies)
	}
	for _, l := range s.Latencies {
		if l.Samples == 0 {
			t.Errorf("latency %s: no samples", l.Name)
		}
	}
	pool, err := pgxpool.New(ctx, testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var orphans []string
	rows, err := pool.Query(ctx, `SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE 'bench\_%\_txbox\_slot'
		AND NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname || '_txbox_slot' = slot_name)
		UNION ALL SELECT pubname FROM pg_publication WHERE pubname LIKE 'bench\_%\_txbox\_pub'
		AND NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname || '_txbox_pub' = pubname)`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		orphans = append(orphans, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(orphans) > 0 {
		t.Errorf("slots and publications left behind by dropped bench schemas: %v", orphans)
	}
}

// wellFormedSVG parses b as XML and checks that the root element is svg
// with at least one drawn rectangle, and that nothing is NaN.
func wellFormedSVG(t *testing.T, b []byte) bool {
	t.Helper()
	if strings.Contains(string(b), "NaN") || strings.Contains(string(b), "<script") {
		return false
	}
	dec := xml.NewDecoder(strings.NewReader(string(b)))
	root, rects := "", 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Logf("xml: %v", err)
			return false
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			if se.Name.Local == "rect" {
				rects++
			}
		}
	}
	return root == "svg" && rects > 1
}
