package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	yaml "go.yaml.in/yaml/v3"

	"github.com/txbox/txbox/config"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// env is the command's view of its surroundings, so tests can run it in
// process with their own streams and environment.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	environ        []string
	// isTTY reports whether stdout is a terminal (live progress redraws).
	isTTY bool
	// hurry is closed on the second SIGINT/SIGTERM (the first cancels the
	// command's context): `txbox relay` then shortens its graceful stop
	// to hurryGrace. Nil when nothing can hurry the command (tests).
	hurry <-chan struct{}
	// secrets are removed from every error printed: the passwords of the
	// loaded configuration and of --dsn.
	secrets []string
}

// addSecrets adds to e.secrets those of secrets it does not hold yet: a
// relay serving tenants loads its configuration again every
// tenants-interval (tenantRelays.list), and the list must not grow.
func (e *env) addSecrets(secrets ...string) {
	for _, s := range secrets {
		if !slices.Contains(e.secrets, s) {
			e.secrets = append(e.secrets, s)
		}
	}
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

type command struct {
	name, summary string
	run           func(ctx context.Context, e *env, args []string) error
}

var commands = []command{
	{"migrate", "create or upgrade txbox's tables", runMigrate},
	{"relay", "deliver outbox rows until SIGTERM or SIGINT", runRelay},
	{"publish", "insert one event in a transaction, from the shell", runPublish},
	{"status", "print the backlog, lag, attempts and last error per event type, and the dead-letter count", runStatus},
	{"dlq", "list, show, retry, resolve or delete dead letters; list parked keys and the audit trail", runDLQ},
	{"redrive", "send kept (PROCESSED) events of a type with a retention again", runRedrive},
	{"demo", "run the whole pipeline on SQLite and an in-process NATS", runDemo},
	{"bench", "measure the relay against the naive loop and watermill (docs/benchmarks/bench-command.md)", runBench},
	{"config", "check the configuration (and with --connect its destinations) or print it with sources", runConfig},
	{"version", "print the version of this build (also --version)", runVersion},
}

func main() {
	// The first SIGINT/SIGTERM cancels the command's context (the relay
	// starts a graceful stop); the second hurries it: the relay gives its
	// batches hurryGrace more, then cancels the sends and releases their
	// rows instead of leaving them claimed for the whole lease; the third
	// exits at once (docs/operations.md, "Run the relay").
	sigs := make(chan os.Signal, 3)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hurry := make(chan struct{})
	go func() {
		<-sigs
		cancel()
		<-sigs
		close(hurry)
		<-sigs
		fmt.Fprintln(os.Stderr, "txbox: third signal: exiting at once; rows still claimed are recovered when their lease expires")
		os.Exit(exitFailure)
	}()
	e := &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, environ: os.Environ(),
		isTTY: isTerminal(os.Stdout), hurry: hurry}
	os.Exit(run(ctx, e, os.Args[1:]))
}

// run executes one command line and returns the exit code. Errors go to
// stderr as "txbox <command>: <error>".
func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		topUsage(e.stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	name := args[0]
	if name == "--version" || name == "-version" {
		name = "version"
	}
	for _, c := range commands {
		if c.name != name {
			continue
		}
		err := c.run(ctx, e, args[1:])
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			return exitOK
		}
		err = config.Scrub(err, e.secrets)
		fmt.Fprintf(e.stderr, "txbox %s: %v\n", name, err)
		var ue *usageError
		if errors.As(err, &ue) || errors.Is(err, config.ErrInvalid) {
			return exitUsage
		}
		return exitFailure
	}
	fmt.Fprintf(e.stderr, "txbox: unknown command %q\n\n", name)
	topUsage(e.stderr)
	return exitUsage
}

func topUsage(w io.Writer) {
	fmt.Fprintln(w, "txbox: transactional outbox relay")
	fmt.Fprintln(w, "\nUsage: txbox <command> [flags]\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'txbox <command> --help' for the flags of a command.")
	fmt.Fprintln(w, "Configuration: docs/configuration.md (YAML file, TXBOX_* environment, --set key=value).")
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(e *env, name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("txbox "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: txbox %s\n\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args and turns flag errors into usage errors.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// multiFlag collects a repeatable flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// configFlags are the flags every command that reads the configuration
// takes.
type configFlags struct {
	path    string
	set     multiFlag
	dialect string
	dsn     string
	// dbNamed is set by load when the file, the environment or a flag
	// names the database (its dialect or its dsn).
	dbNamed bool
	// file is the configuration file load read, "" when none was found.
	file string
	// tenant is --tenant, when the command registered it
	// (registerTenant): load then returns that tenant's configuration.
	tenant string
	// tenantFlag is set by registerTenant; allTenants when the command
	// works on every tenant without --tenant (migrate).
	tenantFlag, allTenants bool
}

// registerTenant adds --tenant: the command works on one tenant of a
// configuration with tenants (docs/multi-tenant.md). Without it such a
// configuration is refused, unless all is set: the command then works on
// every tenant itself (cf.tenants).
func (cf *configFlags) registerTenant(fs *flag.FlagSet, all bool) {
	cf.tenantFlag, cf.allTenants = true, all
	fs.StringVar(&cf.tenant, "tenant", "", "the `name` of the tenant to work on, when the configuration has tenants (docs/multi-tenant.md)")
}

func (cf *configFlags) register(fs *flag.FlagSet, e *env) {
	def := e.getenv("TXBOX_CONFIG")
	fs.StringVar(&cf.path, "config", def, "YAML configuration `file` (env TXBOX_CONFIG; default ./txbox.yaml when it exists)")
	fs.Var(&cf.set, "set", "override one key, `key=value` (repeatable), e.g. --set defaults.batch-size=500")
	fs.StringVar(&cf.dialect, "dialect", "", "shortcut for --set database.dialect=`name` (postgres, mysql, sqlite)")
	fs.StringVar(&cf.dsn, "dsn", "", "shortcut for --set database.dsn=`dsn`")
}

// load reads the configuration: file, then TXBOX_* environment, then
// flags.
func (cf *configFlags) load(e *env) (*config.Config, error) {
	path := cf.path
	if path == "" {
		if _, err := os.Stat("txbox.yaml"); err == nil {
			path = "txbox.yaml"
		}
	}
	src := config.Source{Name: path, Env: e.environ}
	cf.file = path
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, usagef("read configuration: %v", err)
		}
		src.YAML = data
		cf.dbNamed = fileNamesDatabase(data)
	}
	cf.dbNamed = cf.dbNamed || cf.dialect != "" || cf.dsn != ""
	for _, kv := range cf.set {
		k, _, _ := strings.Cut(kv, "=")
		cf.dbNamed = cf.dbNamed || k == "database.dialect" || k == "database.dsn" || k == "database.dsn-env"
	}
	for _, key := range []string{"dialect", "dsn", "dsn-env"} {
		cf.dbNamed = cf.dbNamed || e.getenv(config.EnvName("database", key)) != ""
	}
	src.Set = append(src.Set, cf.set...)
	if cf.dialect != "" {
		src.Set = append(src.Set, "database.dialect="+cf.dialect)
	}
	if cf.dsn != "" {
		src.Set = append(src.Set, "database.dsn="+cf.dsn)
		e.addSecrets(config.DSN(cf.dsn).Secrets()...)
	}
	for _, kv := range cf.set {
		_, v, _ := strings.Cut(kv, "=")
		e.addSecrets(config.DSN(v).Secrets()...)
	}
	cfg, err := config.Load(src)
	if err != nil {
		return nil, err
	}
	e.addSecrets(cfg.Secrets(e.getenv)...)
	return cf.forTenant(cfg)
}

// forTenant returns cfg for the tenant named by --tenant, cfg itself when
// the command did not ask for tenants, or works on them all. A
// configuration with tenants and no --tenant is refused: its database.dsn
// is not any tenant's outbox.
func (cf *configFlags) forTenant(cfg *config.Config) (*config.Config, error) {
	if !cf.tenantFlag {
		return cfg, nil
	}
	if cf.tenant == "" {
		if cfg.HasTenants() && !cf.allTenants {
			return nil, usagef("the configuration has tenants: name one with --tenant NAME (docs/multi-tenant.md)")
		}
		return cfg, nil
	}
	if !cfg.HasTenants() {
		return nil, usagef("--tenant %s: the configuration has no tenants", cf.tenant)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all, err := cfg.ResolveTenants(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range all {
		if t.Name == cf.tenant {
			return cfg.ForTenant(t, len(all))
		}
	}
	return nil, usagef("--tenant %s: no such tenant (the configuration lists %d)", cf.tenant, len(all))
}

// fileNamesDatabase reports whether a configuration file sets
// database.dialect, database.dsn or database.dsn-env. A file that does not
// parse names nothing; config.Load reports why.
func fileNamesDatabase(data []byte) bool {
	var f struct {
		Database map[string]any `yaml:"database"`
	}
	if yaml.Unmarshal(data, &f) != nil {
		return false
	}
	for _, k := range []string{"dialect", "dsn", "dsn-env"} {
		if v, ok := f.Database[k]; ok && v != nil && v != "" {
			return true
		}
	}
	return false
}

// openStore loads the configuration and opens its store, for a command
// that reads or writes an existing database (status, dlq, publish): one
// that is named (see requireDatabase).
func (cf *configFlags) openStore(ctx context.Context, e *env) (*config.Store, error) {
	_, st, err := cf.openStoreConfig(ctx, e)
	return st, err
}

// openStoreConfig is openStore that also returns the configuration.
func (cf *configFlags) openStoreConfig(ctx context.Context, e *env) (*config.Config, *config.Store, error) {
	cfg, err := cf.load(e)
	if err != nil {
		return nil, nil, err
	}
	if err := cf.requireDatabase(cfg, e.getenv); err != nil {
		return nil, nil, err
	}
	st, err := cfg.OpenStore(ctx, e.getenv, cfg.NewLogger(e.stderr))
	return cfg, st, err
}

// requireDatabase refuses to run a command that reads or writes an
// existing database (status, dlq, publish) on the built-in default, an
// SQLite file ./txbox.db, unless the database was named: opening it would
// quietly create an empty file, and the command would then fail with "no
// such table". It also refuses an SQLite file that does not exist yet.
func (cf *configFlags) requireDatabase(cfg *config.Config, getenv func(string) string) error {
	if err := cf.requireNamed(""); err != nil {
		return err
	}
	if cfg.Database.Dialect != config.DialectSQLite {
		return nil
	}
	dsn, err := cfg.DatabaseDSN(getenv)
	if err != nil {
		return err
	}
	path := strings.TrimPrefix(dsn.Reveal(), "file:")
	if path == "" || strings.ContainsAny(path, "?") || strings.Contains(path, ":memory:") {
		return nil // options or an in-memory database: leave it to the driver
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return usagef("SQLite database %s does not exist; create it with `txbox migrate --dialect sqlite --dsn %s`", path, path)
	}
	return nil
}

// requireNamed refuses to go on when neither a configuration file, the
// environment nor a flag names the database: the built-in default is an
// SQLite file ./txbox.db, which opening would create, and a command should
// create a database only when asked to. hint, when not empty, ends the
// message with the command's own way to ask.
func (cf *configFlags) requireNamed(hint string) error {
	if cf.dbNamed {
		return nil
	}
	from := "no configuration file found (" + lookedAt() + ")"
	if cf.file != "" {
		from = "the configuration file " + cf.file + " names none (database.dialect, database.dsn)"
	}
	msg := "no database configured: " + from + ", and no --dialect, --dsn or TXBOX_DATABASE_* names one " +
		"(without one this command would create an empty SQLite file " + config.DefaultSQLitePath + "); give --config FILE or set TXBOX_CONFIG=FILE " +
		"(docs/configuration.md), or --dialect and --dsn, or --dialect sqlite to use " + config.DefaultSQLitePath
	if hint != "" {
		msg += "; " + hint
	}
	return usagef("%s", msg)
}

// lookedAt says where load looked for a configuration file and found
// none: --config and TXBOX_CONFIG were empty (else load reads the file
// they name, or fails), and ./txbox.yaml did not exist.
func lookedAt() string {
	wd, err := os.Getwd()
	if err != nil {
		wd = "."
	}
	return fmt.Sprintf("looked for: --config, not given; TXBOX_CONFIG, not set; %s, does not exist", filepath.Join(wd, "txbox.yaml"))
}

// sortedKeys returns the keys of m, sorted; never nil.
func sortedKeys[V any](m map[string]V) []string {
	keys := slices.AppendSeq(make([]string, 0, len(m)), maps.Keys(m))
	slices.Sort(keys)
	return keys
}
