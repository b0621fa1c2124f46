package cpuprofile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestStartWritesAProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	stop, err := Start(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// Even an empty profile has its gzip'd header.
	if fi.Size() == 0 {
		t.Fatalf("%s is empty", path)
	}
}

func TestStartWithoutPathIsANoOp(t *testing.T) {
	stop, err := Start("")
	if err != nil || stop() != nil {
		t.Fatalf("Start(\"\") = %v", err)
	}
}

func TestStartFailsOnAnUnwritablePath(t *testing.T) {
	if _, err := Start(filepath.Join(t.TempDir(), "missing", "cpu.pprof")); err == nil {
		t.Fatal("Start succeeded on a path in a missing directory")
	}
}
