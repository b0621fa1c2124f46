package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// UsageError is a mistake in the command line; `txbox bench` exits 2 on it.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, args ...any) error { return &UsageError{fmt.Sprintf(format, args...)} }

// Scenario names, in the order they run.
const (
	ScenarioPublish   = "publish"
	ScenarioDrain     = "drain"
	ScenarioPickup    = "pickup"
	ScenarioIdle      = "idle"
	ScenarioInbox     = "inbox"
	ScenarioXmin      = "xmin"
	ScenarioScaling   = "scaling"
	ScenarioRelays    = "relays"
	ScenarioWatermill = "watermill"
	ScenarioWAL       = "wal"
	ScenarioFanout    = "fanout"
	ScenarioTenants   = "tenants"
	// ScenarioTenantsIdle is "tenants-idle".
	ScenarioTenantsIdle = "tenants-idle"
)

// AllScenarios lists every scenario in running order.
var AllScenarios = []string{ScenarioPublish, ScenarioDrain, ScenarioPickup, ScenarioIdle, ScenarioInbox,
	ScenarioXmin, ScenarioScaling, ScenarioRelays, ScenarioWatermill, ScenarioWAL, ScenarioFanout, ScenarioTenants, ScenarioTenantsIdle}

// defaultScenarios are the ones a bare `txbox bench` runs: the main
// comparisons of docs/benchmarks.md "Targets" that finish in minutes. The
// 1M-row scenarios (xmin, scaling) and the others (wal creates
// replication slots) are asked for by name or with --scenario all.
var defaultScenarios = []string{ScenarioPublish, ScenarioDrain, ScenarioPickup, ScenarioIdle, ScenarioWatermill}

// AllSenders are the destinations the drain scenario knows.
var AllSenders = []string{"nats", "kafka", "rabbitmq", "redis", "webhook"}

// Options is one `txbox bench` invocation.
type Options struct {
	Scenarios []string
	Senders   []string
	Dialects  []string
	Quick     bool

	Backlog       int
	Rounds        int
	ScalingSmall  int
	ScalingLarge  int
	XminBacklog   int
	XminHold      time.Duration
	Relays        []int
	PickupRate    int
	PickupFor     time.Duration
	IdleWindow    time.Duration
	IdleTypes     int
	IdleTenants   int
	PublishOps    int
	InboxMessages int
	InboxDups     float64
	WatermillN    int
	WatermillBin  string
	WatermillDir  string
	// WALBacklogs are the wal scenario's backlog sizes; WALRate its
	// pickup rate in events per second.
	WALBacklogs []int
	WALRate     int
	// WALTuned adds the tuned WAL mode variant to the wal scenario.
	WALTuned bool

	DSN       string
	MySQLDSN  string
	NATSURL   string
	RedisAddr string
	RabbitURL string
	OutDir    string
	Timeout   time.Duration
	// ProfileDir, when set, is where the drain's children write CPU
	// profiles: <variant>.pprof (round suffix from round 2 on).
	ProfileDir string
	// Render, when set, is a results.json to write the Markdown and
	// charts from again, measuring nothing.
	Render string

	// Exe is the txbox binary re-executed for the relay and naive-loop
	// children; ChildEnv is their environment (TXBOX_* variables other
	// than TXBOX_TEST_RUN_MAIN are dropped so that none overrides the
	// generated configuration).
	Exe      string
	ChildEnv []string
	// Args is the command line, recorded in the report.
	Args []string
}

// quickDefaults are the sizes of --quick: every scenario finishes in a
// few seconds, for tests; the figures mean nothing.
func (o *Options) applyQuick(set map[string]bool) {
	q := map[string]func(){
		"backlog":           func() { o.Backlog = 2000 },
		"rounds":            func() { o.Rounds = 1 },
		"scaling-small":     func() { o.ScalingSmall = 1000 },
		"scaling-large":     func() { o.ScalingLarge = 4000 },
		"xmin-backlog":      func() { o.XminBacklog = 4000 },
		"xmin-hold":         func() { o.XminHold = 2 * time.Second },
		"relays":            func() { o.Relays = []int{1, 2} },
		"pickup-duration":   func() { o.PickupFor = time.Second },
		"idle-window":       func() { o.IdleWindow = 3 * time.Second },
		"idle-tenants":      func() { o.IdleTenants = 5 },
		"publish-ops":       func() { o.PublishOps = 40 },
		"inbox-messages":    func() { o.InboxMessages = 200 },
		"watermill-backlog": func() { o.WatermillN = 1000 },
		"wal-backlogs":      func() { o.WALBacklogs = []int{2000} },
	}
	for name, f := range q {
		if !set[name] {
			f()
		}
	}
}

const defaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Usage is the first line of `txbox bench --help`.
const Usage = "bench [--scenario publish,drain,pickup,idle,watermill|all] [--senders nats,...] [--backlog N] [--quick] [--out DIR]"

// Parse reads the flags of `txbox bench`. Errors are *UsageError, or
// flag.ErrHelp after printing the help to w.
func Parse(args []string, w io.Writer) (*Options, error) {
	o := &Options{Args: append([]string(nil), args...)}
	fs := flag.NewFlagSet("txbox bench", flag.ContinueOnError)
	fs.SetOutput(w)
	scen := fs.String("scenario", strings.Join(defaultScenarios, ","),
		"comma-separated `scenarios` to run, or all: "+strings.Join(AllScenarios, ", "))
	senders := fs.String("senders", "nats", "`destinations` of the drain scenario, comma-separated, or all: "+strings.Join(AllSenders, ", "))
	dialects := fs.String("dialects", "postgres", "`databases` of the drain scenario, comma-separated, or all: "+strings.Join(AllDialects, ", ")+
		" (the other scenarios run on PostgreSQL)")
	fs.BoolVar(&o.Quick, "quick", false, "tiny sizes and windows so every scenario takes seconds (tests; the figures mean nothing)")
	fs.IntVar(&o.Backlog, "backlog", 200_000, "backlog `rows` of the drain, relays, fanout and tenants scenarios")
	fs.IntVar(&o.Rounds, "rounds", 2, "paired `rounds` of each drain comparison (the median ratio is reported)")
	fs.IntVar(&o.ScalingSmall, "scaling-small", 10_000, "small backlog `rows` of the scaling scenario")
	fs.IntVar(&o.ScalingLarge, "scaling-large", 1_000_000, "large backlog `rows` of the scaling scenario")
	fs.IntVar(&o.XminBacklog, "xmin-backlog", 1_000_000, "backlog `rows` of the pinned-xmin scenario")
	fs.DurationVar(&o.XminHold, "xmin-hold", 60*time.Second, "the pinned drain's session holds its snapshot for the whole drain; this is the least hold the results should cover (a shorter drain is noted)")
	walBacklogs := fs.String("wal-backlogs", "200000", "wal scenario: backlog `rows`, comma-separated (e.g. 200000,1000000)")
	fs.BoolVar(&o.WALTuned, "wal-tuned", false, "wal scenario: also drain with WAL mode tuned (batch-size 1000, database.wal.lane-queue 20000)")
	fs.IntVar(&o.WALRate, "wal-rate", 1000, "wal scenario: pickup `events` per second, one per transaction")
	relays := fs.String("relays", "1,2,3,4", "relay process `counts` of the relays scenario, comma-separated")
	fs.IntVar(&o.PickupRate, "rate", 100, "pickup scenario: `events` per second, one per transaction")
	fs.DurationVar(&o.PickupFor, "pickup-duration", 20*time.Second, "pickup scenario: how long each producer publishes")
	fs.DurationVar(&o.IdleWindow, "idle-window", 10*time.Minute, "idle scenario: how long the idle relay is watched (over 10m: first 10 minutes and after are reported apart)")
	fs.IntVar(&o.IdleTypes, "idle-types", 3, "idle scenario: configured event `types`")
	fs.IntVar(&o.IdleTenants, "idle-tenants", 1000, "tenants-idle scenario: idle schema `tenants` (the window is --idle-window)")
	fs.IntVar(&o.PublishOps, "publish-ops", 2000, "publish scenario: paired `operations` per comparison")
	fs.IntVar(&o.InboxMessages, "inbox-messages", 4000, "inbox scenario: `messages` per variant")
	fs.Float64Var(&o.InboxDups, "inbox-duplicates", 0.1, "inbox scenario: `fraction` of messages that repeat an earlier id")
	fs.IntVar(&o.WatermillN, "watermill-backlog", 50_000, "watermill scenario: backlog `rows`")
	fs.StringVar(&o.WatermillBin, "watermill-bin", "", "prebuilt watermill harness `binary` (default: build --watermill-dir with go build)")
	fs.StringVar(&o.WatermillDir, "watermill-dir", "bench/watermill", "`directory` of the watermill harness module (its own go.mod)")
	fs.StringVar(&o.DSN, "dsn", defaultDSN, "PostgreSQL `URL`; every scenario creates its own schema (idle: its own database) and drops it")
	fs.StringVar(&o.MySQLDSN, "mysql-dsn", "root@tcp(127.0.0.1:3306)/", "MariaDB/MySQL `DSN` (go-sql-driver form) of the drain scenario's mysql dialect; each run creates its own database and drops it")
	fs.StringVar(&o.NATSURL, "nats", "nats://127.0.0.1:4222", "NATS JetStream `URL`")
	fs.StringVar(&o.RedisAddr, "redis", "127.0.0.1:6379", "Redis `address` (drain to redis)")
	fs.StringVar(&o.RabbitURL, "rabbitmq", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ `URL` (drain to rabbitmq)")
	fs.StringVar(&o.OutDir, "out", "bench-results", "output `directory` for results.json, results.md and the SVG charts")
	fs.StringVar(&o.ProfileDir, "profile-dir", "", "diagnostic: the drain-style scenarios' relay and naive-loop children write CPU profiles (--cpuprofile) to `DIR`/<variant>.pprof")
	fs.StringVar(&o.Render, "render", "", "measure nothing: write results.md and the charts of an earlier `results.json` into --out again")
	fs.DurationVar(&o.Timeout, "timeout", 2*time.Hour, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintf(w, "Usage: txbox %s\n\n", Usage)
		fmt.Fprintln(w, "Runs txbox's performance scenarios against the local services, each as a ratio")
		fmt.Fprintln(w, "against a baseline measured in the same invocation (docs/benchmarks/bench-command.md).")
		fmt.Fprintln(w, "The relay and the naive loop run as child processes of this binary.")
		fmt.Fprintln(w)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, &UsageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	if o.Scenarios, err = parseList("--scenario", *scen, AllScenarios); err != nil {
		return nil, err
	}
	if o.Senders, err = parseList("--senders", *senders, AllSenders); err != nil {
		return nil, err
	}
	if o.Dialects, err = parseList("--dialects", *dialects, AllDialects); err != nil {
		return nil, err
	}
	if o.Relays, err = parseCounts(*relays); err != nil {
		return nil, err
	}
	if o.WALBacklogs, err = parseSizes("--wal-backlogs", *walBacklogs); err != nil {
		return nil, err
	}
	if o.Quick {
		o.applyQuick(set)
	}
	return o, o.validate()
}

func parseList(flagName, v string, valid []string) ([]string, error) {
	if strings.TrimSpace(v) == "all" {
		return slices.Clone(valid), nil
	}
	seen := map[string]bool{}
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(valid, s) {
			return nil, usagef("%s: unknown name %q (valid: %s, or all)", flagName, s, strings.Join(valid, ", "))
		}
		seen[s] = true
	}
	var out []string
	for _, s := range valid { // running order, no duplicates
		if seen[s] {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, usagef("%s: name at least one of %s, or all", flagName, strings.Join(valid, ", "))
	}
	return out, nil
}

func parseCounts(v string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 16 {
			return nil, usagef("--relays: %q is not a process count between 1 and 16", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseSizes(flagName, v string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 100 || n > 50_000_000 {
			return nil, usagef("%s: %q is not a backlog between 100 and 50000000 rows", flagName, s)
		}
		out = append(out, n)
	}
	return out, nil
}

func (o *Options) validate() error {
	pos := []struct {
		name string
		v    int
		min  int
	}{
		{"--backlog", o.Backlog, 100}, {"--rounds", o.Rounds, 1}, {"--scaling-small", o.ScalingSmall, 100},
		{"--scaling-large", o.ScalingLarge, 100}, {"--xmin-backlog", o.XminBacklog, 100}, {"--rate", o.PickupRate, 1},
		{"--idle-types", o.IdleTypes, 1}, {"--idle-tenants", o.IdleTenants, 1}, {"--publish-ops", o.PublishOps, 4}, {"--inbox-messages", o.InboxMessages, 10},
		{"--watermill-backlog", o.WatermillN, 100}, {"--wal-rate", o.WALRate, 1},
	}
	for _, p := range pos {
		if p.v < p.min {
			return usagef("%s must be at least %d, not %d", p.name, p.min, p.v)
		}
	}
	if o.Backlog > 50_000_000 || o.ScalingLarge > 50_000_000 || o.XminBacklog > 50_000_000 {
		return usagef("backlogs are limited to 50,000,000 rows")
	}
	if o.PickupRate > 20_000 {
		return usagef("--rate must be at most 20000 events/s, not %d", o.PickupRate)
	}
	if o.WALRate > 20_000 {
		return usagef("--wal-rate must be at most 20000 events/s, not %d", o.WALRate)
	}
	durs := []struct {
		name string
		v    time.Duration
	}{{"--xmin-hold", o.XminHold}, {"--pickup-duration", o.PickupFor}, {"--idle-window", o.IdleWindow}, {"--timeout", o.Timeout}}
	for _, d := range durs {
		if d.v <= 0 {
			return usagef("%s must be > 0, not %s", d.name, d.v)
		}
	}
	if o.InboxDups < 0 || o.InboxDups >= 1 {
		return usagef("--inbox-duplicates must be in [0, 1), not %g", o.InboxDups)
	}
	if o.OutDir == "" {
		return usagef("--out must name a directory")
	}
	if !strings.HasPrefix(o.DSN, "postgres://") && !strings.HasPrefix(o.DSN, "postgresql://") {
		return usagef("--dsn must be a PostgreSQL URL (postgres://…): every scenario runs on PostgreSQL; for MariaDB or SQLite drains give --dialects mysql,sqlite (and --mysql-dsn)")
	}
	return nil
}

func (o *Options) has(s string) bool { return slices.Contains(o.Scenarios, s) }
