package pgcluster

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Paths of a data directory that a base backup leaves out, as
// pg_basebackup does (src/backend/backup/basebackup.c): directories
// whose contents the server rebuilds, or that the standby streams (pg_wal)
// or must not inherit (pg_replslot: the primary's slots), and files of
// the running server.
var (
	skipContents = map[string]bool{
		"pg_wal": true, "pg_replslot": true, "pg_dynshmem": true, "pg_notify": true,
		"pg_serial": true, "pg_snapshots": true, "pg_stat_tmp": true, "pg_subtrans": true,
	}
	skipFiles = map[string]bool{
		"postmaster.pid": true, "postmaster.opts": true, "backup_label": true,
		"tablespace_map": true, "standby.signal": true, "recovery.signal": true,
		"current_logfiles": true, "backup_manifest": true,
	}
	// emptyDirs are made in the copy: pg_wal's subdirectories.
	emptyDirs = []string{"pg_wal/archive_status", "pg_wal/summaries"}
)

// copyDataDir copies a running server's data directory src to dst (which
// must not exist), owned by o, leaving out what pg_basebackup leaves out.
// Files the server removes while the copy runs are skipped: the WAL
// replayed from the backup's start makes the copy consistent, as it does
// for any base backup.
func copyDataDir(src, dst string, o owner) error {
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		name := d.Name()
		switch {
		case rel != "." && (skipFiles[rel] || name == "pg_internal.init" || strings.HasPrefix(name, "pgsql_tmp")):
			return nil
		case d.IsDir():
			if err := o.mkdir(target); err != nil {
				return err
			}
			if skipContents[rel] {
				return fs.SkipDir
			}
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return ignoreGone(err)
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
			return o.chown(target)
		default:
			return copyFile(path, target, o)
		}
	})
	if err != nil {
		return err
	}
	for _, d := range emptyDirs {
		if err := o.mkdir(filepath.Join(dst, d)); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

// copyFile copies src to dst, owned by o, with src's permissions; a src
// removed meanwhile is skipped.
func copyFile(src, dst string, o owner) error {
	in, err := os.Open(src)
	if err != nil {
		return ignoreGone(err)
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return o.chown(dst)
}

func ignoreGone(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
