package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

// buildRevision is the VCS revision set at link time
// (-ldflags "-X main.buildRevision=..."), for builds that have no VCS
// information of their own, such as the Dockerfile's. Build information
// wins when it has a revision.
var buildRevision string

func runVersion(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "version", "version")
	if err := parse(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, versionString())
	return nil
}

// versionString is the module version of this build (a tagged release,
// "(devel)" for a build from a work tree), the VCS revision when known,
// and the Go version.
func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "txbox (unknown version: no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	s := "txbox " + v
	var rev, modified string
	for _, st := range bi.Settings {
		switch st.Key {
		case "vcs.revision":
			rev = st.Value
		case "vcs.modified":
			modified = st.Value
		}
	}
	if rev == "" {
		// A build without VCS stamping (a container build whose context
		// has no .git) gets its revision from the linker instead.
		rev = buildRevision
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		s += " rev " + rev
		if modified == "true" {
			s += "+dirty"
		}
	}
	return fmt.Sprintf("%s %s %s", s, bi.Path, bi.GoVersion)
}
