package drain_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txbox/txbox/consume/internal/drain"
)

type key struct{}

func TestContextOutlivesRunUntilTheDeadline(t *testing.T) {
	t.Parallel()
	run, cancelRun := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	ctx, stop := drain.Context(run, context.WithoutCancel(run), 50*time.Millisecond)
	defer stop()
	if ctx.Value(key{}) != "v" {
		t.Error("run's values are lost")
	}
	cancelRun()
	if ctx.Err() != nil {
		t.Fatal("the handler context ended with run; it must outlive it until the deadline")
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the handler context was never cancelled after the deadline")
	}
	if !errors.Is(context.Cause(ctx), drain.ErrDeadline) {
		t.Errorf("cause = %v, want ErrDeadline", context.Cause(ctx))
	}
}

func TestStopReleases(t *testing.T) {
	t.Parallel()
	run, cancelRun := context.WithCancel(context.Background())
	defer cancelRun()
	ctx, stop := drain.Context(run, context.WithoutCancel(run), time.Hour)
	stop()
	if ctx.Err() == nil {
		t.Error("stop did not cancel the handler context")
	}
	if errors.Is(context.Cause(ctx), drain.ErrDeadline) {
		t.Error("stop before run ended reports the deadline")
	}
	cancelRun() // no timer may start after stop
}

func TestHardEndsTheHandlers(t *testing.T) {
	t.Parallel()
	run, cancelRun := context.WithCancel(context.Background())
	defer cancelRun()
	hard, cancelHard := context.WithCancel(context.Background())
	ctx, stop := drain.Context(run, hard, time.Hour)
	defer stop()
	cancelRun()
	if ctx.Err() != nil {
		t.Fatal("the handler context ended with run")
	}
	cancelHard()
	if ctx.Err() == nil {
		t.Fatal("the handler context outlived hard")
	}
	if errors.Is(context.Cause(ctx), drain.ErrDeadline) {
		t.Error("a hard stop reports the drain deadline")
	}
}
