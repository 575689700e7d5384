//go:build linux

package volume

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// tempPattern is the os.CreateTemp pattern of the temporary file a file
// target is written under: ".disk.img.partial-" and CreateTemp's random
// decimal suffix.
func tempPattern(path string) string { return "." + filepath.Base(path) + ".partial-*" }

// isOurTemp reports whether name is exactly a temporary file name that
// tempPattern produces for target: the prefix and a non-empty, all-digit
// suffix (what os.CreateTemp puts for the "*"). Nothing else in the
// directory is ever taken for ours.
func isOurTemp(name, target string) bool {
	prefix := "." + filepath.Base(target) + ".partial-"
	suffix, ok := strings.CutPrefix(name, prefix)
	if !ok || suffix == "" {
		return false
	}
	for _, c := range []byte(suffix) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// lockTemp takes a non-blocking exclusive flock on an open temporary file.
// It is held for as long as the descriptor is open (by the Target, or by a
// process that still runs), which tells removeStaleTemps a live import's
// file from one left by a killed process: the kernel drops a dead
// process's locks.
func lockTemp(f *os.File) error {
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
}

// removeStaleTemps deletes the temporary files that imports of target
// killed before Commit or Abort left in dir (after a SIGKILL or an OOM
// kill, `.disk.img.partial-*` would otherwise fill the volume and make
// every retry fail for lack of space). Only regular files of exactly our
// naming for this target are touched, and only when no one holds their
// lock. It returns the bytes the removed files occupied; the caller
// measures free space afterwards, so that space counts as free.
func removeStaleTemps(dir, target string, log *slog.Logger) (freed int64, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("listing %s for stale temporary files: %w", dir, err)
	}
	for _, e := range ents {
		if !isOurTemp(e.Name(), target) || !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		n, removed, err := removeIfStale(p)
		if err != nil {
			return freed, err
		}
		if !removed {
			log.Info("Temporary file of another import of this target is in use; left in place", "path", p)
			continue
		}
		freed += n
		log.Info("Removed the temporary file of an interrupted import", "path", p, "allocated_bytes", n)
	}
	return freed, nil
}

// removeIfStale removes p unless another descriptor holds its lock, and
// returns the space it took.
func removeIfStale(p string) (allocated int64, removed bool, err error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil // gone meanwhile
	}
	if err != nil {
		return 0, false, fmt.Errorf("opening stale temporary file %s: %w", p, err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, false, fmt.Errorf("stat %s: %w", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, false, nil
	}
	if err := lockTemp(f); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("locking %s: %w", p, err)
	}
	// Removed while we hold the lock, so no new import can have claimed it.
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, false, fmt.Errorf("removing stale temporary file %s: %w", p, err)
	}
	return st.Blocks * 512, true, nil
}
