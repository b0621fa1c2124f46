package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// watermillResult is the JSON line bench/watermill prints.
type watermillResult struct {
	Events     int     `json:"events"`
	Seconds    float64 `json:"seconds"`
	Rate       float64 `json:"rate"`
	CPUSeconds float64 `json:"cpu_seconds"`
	Config     string  `json:"config"`
	Versions   string  `json:"versions"`
}

// watermillBinary returns the harness to run: --watermill-bin, or a build
// of --watermill-dir. The error says why it is not available.
func (r *runner) watermillBinary(ctx context.Context) (string, error) {
	if r.o.WatermillBin != "" {
		if _, err := os.Stat(r.o.WatermillBin); err != nil {
			return "", fmt.Errorf("--watermill-bin: %v", err)
		}
		return r.o.WatermillBin, nil
	}
	if _, err := os.Stat(filepath.Join(r.o.WatermillDir, "go.mod")); err != nil {
		return "", fmt.Errorf("no watermill harness module at --watermill-dir %s (run from the repository root, or give --watermill-dir or --watermill-bin): %v", r.o.WatermillDir, err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("building the harness in %s needs the go command: %v (or give --watermill-bin)", r.o.WatermillDir, err)
	}
	out := filepath.Join(r.scratch, "watermill-bench")
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", out, ".")
	cmd.Dir = r.o.WatermillDir
	cmd.Env = childEnv(os.Environ())
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build in %s: %v\n%s", r.o.WatermillDir, err, b)
	}
	return out, nil
}

// watermillDrain runs the harness once on a fresh schema and stream.
func (r *runner) watermillDrain(ctx context.Context, bin string, n, round int) (Measurement, string, error) {
	run := Measurement{Variant: "watermill forwarder", Round: round, Events: n, Extra: map[string]float64{}}
	schema, err := r.db.newSchema(ctx)
	if err != nil {
		return run, "", err
	}
	defer r.db.drop(schema)
	tgt, err := r.br.newTarget(ctx, "nats")
	if err != nil {
		return run, "", err
	}
	defer tgt.close()
	nt := tgt.(*natsTarget)
	r.p.begin(fmt.Sprintf("watermill forwarder: COPY and drain %d", n))
	cmd := exec.CommandContext(ctx, bin, "--dsn", r.o.DSN, "--schema", schema, "--nats", r.o.NATSURL,
		"--subject", nt.subj+"."+benchType, "--stream", nt.stream.CachedInfo().Config.Name, "--n", strconv.Itoa(n))
	var stdout bytes.Buffer
	stderr := &tail{seen: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		return run, "", err
	}
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-tick.C:
			if got, err := tgt.count(ctx); err == nil {
				r.p.count(got, int64(n))
			}
		}
	}
	if err != nil {
		return run, "", fmt.Errorf("watermill harness: %v\n%s", err, stderr)
	}
	var res watermillResult
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &res); err != nil {
		return run, "", fmt.Errorf("watermill harness printed %q: %v", stdout.String(), err)
	}
	if got, err := tgt.count(ctx); err != nil || got < int64(n) {
		return run, "", fmt.Errorf("watermill harness reported done but the stream holds %d of %d (%v)", got, n, err)
	}
	run.Seconds, run.Rate, run.CPUSeconds = res.Seconds, res.Rate, res.CPUSeconds
	run.CPUPerEventMicros = res.CPUSeconds / float64(n) * 1e6
	r.p.note("  %-22s %8d events in %6.2fs = %8.0f/s, CPU %.2f µs/event", run.Variant, n, run.Seconds, run.Rate, run.CPUPerEventMicros)
	return run, res.Config + " (" + res.Versions + ")", nil
}

func (r *runner) scenarioWatermill(ctx context.Context, s *Scenario) error {
	s.Title = "watermill side by side"
	s.Measures = "The same backlog drained to NATS by the watermill-sql forwarder (bench/watermill, its own Go module, " +
		"run as a child), by `txbox relay` with default settings and tuned (`batch-size: 1000`), and by the naive loop, paired per round. The harness " +
		"preloads its own table with COPY before its clock starts; its CPU is the harness's rusage over the drain only."
	s.Conditions = map[string]string{"backlog": strconv.Itoa(r.o.WatermillN), "rounds": strconv.Itoa(r.o.Rounds)}
	r.p.begin("watermill: build the harness")
	bin, err := r.watermillBinary(ctx)
	if err != nil {
		s.Unavailable = "the watermill harness is not available, so only txbox was measured: " + err.Error()
		r.p.note("watermill: NOT AVAILABLE: %s", firstLine(err.Error()))
	}
	relaySpec := drainSpec{variant: "relay default", sender: "nats", n: r.o.WatermillN, relays: 1}
	tunedSpec := drainSpec{variant: "relay tuned", sender: "nats", n: r.o.WatermillN, relays: 1, settings: relayTuned}
	naiveSpec := drainSpec{variant: "naive loop", sender: "nats", n: r.o.WatermillN, naive: true}
	for round := 1; round <= r.o.Rounds; round++ {
		steps := []string{"watermill", "relay", "tuned", "naive"}
		if round%2 == 0 {
			steps = []string{"naive", "tuned", "relay", "watermill"}
		}
		for _, st := range steps {
			var run Measurement
			var err error
			switch st {
			case "watermill":
				if bin == "" {
					continue
				}
				var conf string
				run, conf, err = r.watermillDrain(ctx, bin, r.o.WatermillN, round)
				if conf != "" {
					s.Conditions["watermill configuration"] = conf
				}
			case "relay":
				run, err = r.drain(ctx, relaySpec, round)
			case "tuned":
				run, err = r.drain(ctx, tunedSpec, round)
			case "naive":
				run, err = r.drain(ctx, naiveSpec, round)
			}
			if err != nil {
				return fmt.Errorf("%s round %d: %w", st, round, err)
			}
			s.Runs = append(s.Runs, run)
		}
	}
	if bin != "" {
		s.addRatio("relay default / watermill", relaySpec.variant, "watermill forwarder", s.rates(relaySpec.variant), s.rates("watermill forwarder"), true,
			"≥ 7×", func(x float64) bool { return x >= 7 })
		s.addRatio("relay tuned / watermill", tunedSpec.variant, "watermill forwarder", s.rates(tunedSpec.variant), s.rates("watermill forwarder"), true,
			"≥ 7×", func(x float64) bool { return x >= 7 })
		s.addRatio("naive loop / watermill", naiveSpec.variant, "watermill forwarder", s.rates(naiveSpec.variant), s.rates("watermill forwarder"), true, "", nil)
	}
	s.addRatio("relay default / naive loop", relaySpec.variant, naiveSpec.variant, s.rates(relaySpec.variant), s.rates(naiveSpec.variant), true, "", nil)
	r.addCPUNote(s, relaySpec.variant, tunedSpec.variant, naiveSpec.variant, "watermill forwarder")
	if bin == "" && !strings.Contains(strings.Join(s.Notes, " "), "not available") {
		s.Notes = append(s.Notes, "watermill: not measured (see above)")
	}
	return nil
}
