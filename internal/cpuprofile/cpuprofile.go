// Package cpuprofile starts and stops a runtime/pprof CPU profile for the
// --cpuprofile diagnostic of `txbox relay` and of the bench's naive-loop
// child (docs/operations.md, "Profile the relay").
package cpuprofile

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
)

// Start begins a CPU profile written to path and returns the function that
// stops it and closes the file. An empty path profiles nothing and returns
// a no-op, so callers need no branch of their own.
func Start(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cpu profile %s: %w", path, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return errors.Join(fmt.Errorf("cpu profile %s", path), err)
		}
		return nil
	}, nil
}
