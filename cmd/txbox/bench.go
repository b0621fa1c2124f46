package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/txbox/txbox/cmd/txbox/internal/bench"
)

// runBench is `txbox bench`: the performance scenarios of
// docs/benchmarks/bench-command.md. The work is in
// cmd/txbox/internal/bench; the relay and naive-loop children it starts are
// re-executions of this binary.
func runBench(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 && args[0] == bench.NaiveChild {
		err := bench.RunNaive(ctx, args[1:], e.stderr)
		return benchErr(err)
	}
	o, err := bench.Parse(args, e.stderr)
	if err != nil {
		return benchErr(err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary to run the relay children: %w", err)
	}
	o.Exe, o.ChildEnv = exe, e.environ
	return bench.Run(ctx, o, e.stdout, e.stderr, isTerminal(os.Stderr), versionString())
}

// benchErr maps the bench package's usage errors to exit code 2.
func benchErr(err error) error {
	var ue *bench.UsageError
	if errors.As(err, &ue) {
		return &usageError{ue.Msg}
	}
	if errors.Is(err, flag.ErrHelp) {
		return flag.ErrHelp
	}
	return err
}
