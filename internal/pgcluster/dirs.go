package pgcluster

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// User is the unprivileged system user that runs the servers when the
// tests run as root (scripts/pg-versions.sh creates it).
const User = "txbox-pg"

// installHint is what a test that finds no server binary says to do.
const installHint = "run scripts/pg-versions.sh (make services does)"

// mirrorDir is where scripts/pg-versions.sh copies the binaries, under
// the first 16 hex digits of the lockfile's SHA-256, when the servers'
// user cannot read the checkout.
const mirrorDir = "/var/cache/txbox-pgbin"

// binDir returns the directory of v's initdb and postgres: the npm alias
// pg<v> under scripts/pgbin/node_modules of the checkout the process runs
// in (found by walking up from the working directory), or its copy in
// mirrorDir when there is one for the checkout's lockfile.
func binDir(v Version) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	alias := filepath.Join("pg"+strconv.Itoa(int(v)), "native", "bin")
	for dir := wd; ; dir = filepath.Dir(dir) {
		pgbin := filepath.Join(dir, "scripts", "pgbin")
		if lock, err := os.ReadFile(filepath.Join(pgbin, "package-lock.json")); err == nil {
			sum := sha256.Sum256(lock)
			mirror := filepath.Join(mirrorDir, hex.EncodeToString(sum[:8]), alias)
			if _, err := os.Stat(filepath.Join(mirror, "postgres")); err == nil {
				return mirror, nil
			}
			bin := filepath.Join(pgbin, "node_modules", alias)
			if _, err := os.Stat(filepath.Join(bin, "postgres")); err != nil {
				return "", fmt.Errorf("pgcluster: %v is not installed (%v): %s", v, err, installHint)
			}
			return bin, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("pgcluster: no scripts/pgbin/package-lock.json above %s: not a txbox checkout", wd)
		}
	}
}

// owner is who runs the servers and owns their directories: nil when the
// process is not root and runs them itself.
type owner struct {
	cred *syscall.Credential
}

var (
	ownerOnce sync.Once
	theOwner  owner
	ownerErr  error
)

// serverOwner returns the owner of the servers, looking User up once.
func serverOwner() (owner, error) {
	ownerOnce.Do(func() {
		if os.Geteuid() != 0 {
			return
		}
		u, err := user.Lookup(User)
		if err != nil {
			ownerErr = fmt.Errorf("pgcluster: PostgreSQL refuses to run as root and the user %s is missing (%v): %s", User, err, installHint)
			return
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		theOwner.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
	})
	return theOwner, ownerErr
}

// chown gives path to the servers' user; a no-op when not root.
func (o owner) chown(path string) error {
	if o.cred == nil {
		return nil
	}
	return os.Lchown(path, int(o.cred.Uid), int(o.cred.Gid))
}

// mkdir creates dir (mode 0700, as PostgreSQL wants a data directory)
// owned by the servers' user.
func (o owner) mkdir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	return o.chown(dir)
}

// baseDir is the directory of every process's servers.
func baseDir() string { return filepath.Join(os.TempDir(), "txbox-pgcluster") }

var (
	processOnce sync.Once
	processDir  string
	processErr  error
)

// processDirectory returns this process's directory under baseDir, named
// by its pid and start time, creating it on the first call after
// removing what dead processes left behind.
func processDirectory() (string, error) {
	processOnce.Do(func() {
		base := baseDir()
		if processErr = os.MkdirAll(base, 0o755); processErr != nil {
			return
		}
		removeStale(base)
		start, err := startTime(os.Getpid())
		if err != nil {
			processErr = err
			return
		}
		processDir = filepath.Join(base, fmt.Sprintf("%d-%s", os.Getpid(), start))
		if err := os.Mkdir(processDir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			processErr = err
		}
	})
	return processDir, processErr
}

// startTime returns field 22 of /proc/<pid>/stat, the process's start
// time in clock ticks since boot: with the pid, it names one process
// even when pids are reused.
func startTime(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// The command name (field 2) may hold spaces; fields after it do not.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", fmt.Errorf("pgcluster: /proc/%d/stat: unexpected %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return "", fmt.Errorf("pgcluster: /proc/%d/stat: unexpected %q", pid, b)
	}
	return f[19], nil
}

// removeStale kills the servers of every process directory under base
// whose process is gone, and removes the directory.
func removeStale(base string) {
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		pid, start, ok := strings.Cut(e.Name(), "-")
		if !ok || !e.IsDir() {
			continue
		}
		n, err := strconv.Atoi(pid)
		if err != nil {
			continue
		}
		if now, err := startTime(n); err == nil && now == start {
			continue // its process still runs
		}
		dir := filepath.Join(base, e.Name())
		nodes, _ := filepath.Glob(filepath.Join(dir, "*", "data"))
		for _, data := range nodes {
			killServer(data)
		}
		_ = os.RemoveAll(dir)
	}
}

// killServer sends SIGKILL to every process of the server on data.
func killServer(data string) {
	for _, pid := range serverPIDs(data) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// serverPIDs returns the processes whose working directory is data: the
// postmaster of data and its backends (a postmaster works in its data
// directory), and nothing else, even where pids were reused.
func serverPIDs(data string) []int {
	if d, err := filepath.EvalSymlinks(data); err == nil {
		data = d
	}
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil && cwd == data {
			pids = append(pids, pid)
		}
	}
	return pids
}
