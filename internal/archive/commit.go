package archive

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
)

// StagingPrefix starts the name of the hidden directory, inside the
// destination, that an archive is extracted into before Commit.
const StagingPrefix = ".importer-archive-"

// NewStaging creates an empty staging directory inside dest: on the same
// filesystem, so Commit can rename entries into place.
func NewStaging(dest string) (string, error) {
	st, err := os.Stat(dest)
	if err != nil {
		return "", fmt.Errorf("archive destination %s: %w", dest, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("archive destination %s is not a directory: %w", dest, errdefs.ErrInvalidOptions)
	}
	dir, err := os.MkdirTemp(dest, StagingPrefix+"*")
	if err != nil {
		return "", fmt.Errorf("creating staging directory in %s: %w", dest, err)
	}
	return dir, nil
}

// Commit moves every top-level entry of staging into dest, flushes the
// filesystem, and removes the (then empty) staging directory. It is
// all-or-nothing: when dest already holds an entry of the same name nothing
// is moved, and when a move or the flush fails the entries already moved
// go back to staging. The caller removes staging after a failure.
func Commit(staging, dest string) error {
	entries, err := os.ReadDir(staging)
	if err != nil {
		return fmt.Errorf("reading staging directory %s: %w", staging, err)
	}
	for _, e := range entries {
		if _, err := os.Lstat(filepath.Join(dest, e.Name())); err == nil {
			return fmt.Errorf("destination %s already holds %q; an archive is only extracted into names that do not exist yet: %w",
				dest, e.Name(), errdefs.ErrInvalidOptions)
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("checking %s: %w", filepath.Join(dest, e.Name()), err)
		}
	}
	var moved []string
	undo := func() {
		for _, name := range moved {
			_ = unix.Renameat2(unix.AT_FDCWD, filepath.Join(dest, name), unix.AT_FDCWD, filepath.Join(staging, name), unix.RENAME_NOREPLACE)
		}
	}
	for _, e := range entries {
		// RENAME_NOREPLACE: a name that appeared since the check is not
		// overwritten.
		if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(staging, e.Name()), unix.AT_FDCWD, filepath.Join(dest, e.Name()), unix.RENAME_NOREPLACE); err != nil {
			undo()
			return fmt.Errorf("moving %q into %s: %w", e.Name(), dest, err)
		}
		moved = append(moved, e.Name())
	}
	if err := syncFS(dest); err != nil {
		undo()
		return err
	}
	if err := os.Remove(staging); err != nil {
		return fmt.Errorf("removing staging directory %s: %w", staging, err)
	}
	return nil
}

// syncFS flushes the filesystem holding dir: one syncfs covers every file
// and directory extracted, far cheaper than an fsync per file.
func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening %s to sync: %w", dir, err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", dir, err)
	}
	return nil
}
