// Package bench is `txbox bench`: txbox's performance scenarios of
// docs/benchmarks.md "Targets", each measured as a ratio against a
// baseline run in the same invocation (paired or interleaved, because the
// machine the figures come from is shared and noisy), written as JSON,
// Markdown and SVG charts. How to run it and what each scenario measures:
// docs/benchmarks/bench-command.md.
//
// The relay and the naive loop run as child processes (re-executions of
// the txbox binary) so that their CPU time per event can be read from
// rusage. The watermill-sql forwarder runs from its own Go module under
// bench/watermill, so the txbox module does not depend on watermill.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// scenarioFunc fills in one scenario's result.
type scenarioFunc func(r *runner, ctx context.Context, s *Scenario) error

var scenarios = map[string]scenarioFunc{
	ScenarioPublish:     (*runner).scenarioPublish,
	ScenarioDrain:       (*runner).scenarioDrain,
	ScenarioPickup:      (*runner).scenarioPickup,
	ScenarioIdle:        (*runner).scenarioIdle,
	ScenarioInbox:       (*runner).scenarioInbox,
	ScenarioXmin:        (*runner).scenarioXmin,
	ScenarioScaling:     (*runner).scenarioScaling,
	ScenarioRelays:      (*runner).scenarioRelays,
	ScenarioWatermill:   (*runner).scenarioWatermill,
	ScenarioWAL:         (*runner).scenarioWAL,
	ScenarioFanout:      (*runner).scenarioFanout,
	ScenarioTenants:     (*runner).scenarioTenants,
	ScenarioTenantsIdle: (*runner).scenarioTenantsIdle,
}

// runner holds what the scenarios share.
type runner struct {
	o       *Options
	db      *db
	br      *brokers
	p       *progress
	scratch string
}

// ErrScenarios is returned (wrapped) when some scenario failed; the
// results of the others are still written.
var ErrScenarios = errors.New("some scenarios failed")

// Run runs the scenarios of o, writes the results into o.OutDir and
// prints their paths to stdout. Progress goes to stderr (redrawn in place
// when tty).
func Run(ctx context.Context, o *Options, stdout, stderr io.Writer, tty bool, version string) error {
	if o.Render != "" {
		return render(o.Render, o.OutDir, stdout)
	}
	if o.Exe == "" {
		return errors.New("bench: no txbox binary to run the children with")
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	rep := &Report{Started: time.Now(), Quick: o.Quick, Args: o.Args}
	rep.Machine = describeMachine(ctx, o)
	rep.Machine.TxboxVersion = version
	d, err := openDB(ctx, o.DSN, 8)
	if err != nil {
		return err
	}
	defer d.pool.Close()
	scratch, err := os.MkdirTemp("", "txbox-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	r := &runner{o: o, db: d, br: &brokers{o: o}, p: newProgress(stderr, tty, o.plannedSteps()), scratch: scratch}
	defer r.br.close()

	var failed []string
	for _, name := range o.Scenarios {
		s := Scenario{Name: name}
		start := time.Now()
		r.p.note("== %s", name)
		err := scenarios[name](r, ctx, &s)
		s.Seconds = time.Since(start).Seconds()
		if err != nil {
			s.Error = err.Error()
			failed = append(failed, name)
			r.p.note("%s failed: %v", name, firstLine(err.Error()))
		}
		for _, ra := range s.Ratios {
			r.p.note("  %-44s %.3f", ra.Name, ra.Median)
		}
		rep.Scenarios = append(rep.Scenarios, s)
		if ctx.Err() != nil {
			break
		}
	}
	r.p.finish()
	rep.Finished = time.Now()
	rep.Machine.LoadAfter = loadAverage()
	paths, werr := rep.write(o.OutDir)
	if werr != nil {
		return fmt.Errorf("write results: %w", werr)
	}
	for _, p := range paths {
		fmt.Fprintln(stdout, p)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("stopped: %w (results so far written)", ctx.Err())
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: %s (see %s)", ErrScenarios, strings.Join(failed, ", "), paths[len(paths)-1])
	}
	return nil
}

// plannedSteps counts the progress bar's steps (each drain is two: the
// COPY and the drain itself).
func (o *Options) plannedSteps() int {
	n := 0
	for _, sc := range o.Scenarios {
		switch sc {
		case ScenarioPublish:
			n += 2
		case ScenarioDrain:
			for _, d := range o.Dialects {
				variants := 5 // naive, default, tuned, kept, other claim
				if d == dialectSQLite {
					variants = 4 // no lock claim
				}
				n += len(o.Senders) * variants * o.Rounds * 2
			}
		case ScenarioPickup:
			n += 4
		case ScenarioIdle, ScenarioInbox:
			n++
		case ScenarioXmin, ScenarioScaling:
			n += 2 * o.Rounds * 2
		case ScenarioRelays:
			n += len(o.Relays) * o.Rounds * 2
		case ScenarioFanout:
			n += 2 * o.Rounds * 2
		case ScenarioTenants: // four variants, load and drain each
			n += 4 * o.Rounds * 2
		case ScenarioWatermill:
			n += 1 + o.Rounds*7 // watermill 1, relay, tuned and naive 2 each
		case ScenarioWAL:
			// naive, lock, WAL (, WAL tuned): load and drain; the naive
			// loop without a database: drain only.
			steps := 3*2 + 1
			if o.WALTuned {
				steps += 2
			}
			n += len(o.WALBacklogs)*len(o.Senders)*steps*o.Rounds + 2 // two pickups
		}
	}
	return n
}

// render writes the Markdown and charts of an earlier results.json.
func render(path, dir string, stdout io.Writer) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return usagef("--render: %v", err)
	}
	var rep Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		return usagef("--render %s: not a txbox bench results.json: %v", path, err)
	}
	paths, err := rep.write(dir)
	for _, p := range paths {
		fmt.Fprintln(stdout, p)
	}
	return err
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
