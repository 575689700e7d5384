//go:build linux

package volume

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// GrowFile extends a raw file to size (never shrinks it) and, with
// preallocate, allocates every block (holes included) with fallocate.
func GrowFile(path string, size int64, preallocate bool) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() < size {
		if err := f.Truncate(size); err != nil {
			return err
		}
	}
	if preallocate && size > 0 {
		if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
			return fmt.Errorf("preallocating: %w", err)
		}
	}
	return nil
}

// SupportsDirectIO reports whether the filesystem holding path accepts
// O_DIRECT (tmpfs before Linux 6.6 does not). It creates path when missing.
func SupportsDirectIO(path string) bool {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_DIRECT|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}
