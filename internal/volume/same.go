//go:build linux

package volume

import (
	"fmt"
	"os"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blockdev"
)

// RefuseSameVolume stops a copy of a volume onto itself: src and dst one
// file (under any name), nodes of one block device, or paths whose bytes
// lie in one place below loop devices, partitions and device-mapper or md
// devices (blockdev.Holds: a loop device over the source file, a partition
// of it, a device-mapper device over either; a partition and its disk). A
// device and a loop device over a file on its filesystem are apart. A name
// that cannot be read is not judged (a missing target is no copy of
// anything), nor is a stack sysfs does not describe.
func RefuseSameVolume(src, dst string) error {
	a, err := os.Stat(src)
	if err != nil {
		return nil
	}
	b, err := os.Stat(dst)
	if err != nil {
		return nil
	}
	if blockdev.SameDevice(a, b) {
		return fmt.Errorf("source %s and target %s are the same block device: %w", src, dst, errdefs.ErrInvalidOptions)
	}
	if os.SameFile(a, b) {
		return fmt.Errorf("source %s and target %s are the same file: %w", src, dst, errdefs.ErrInvalidOptions)
	}
	srcHolds, err := blockdev.Holds(src)
	if err != nil {
		return nil
	}
	dstHolds, err := blockdev.Holds(dst)
	if err != nil {
		return nil
	}
	for _, s := range srcHolds {
		for _, d := range dstHolds {
			if s.Overlaps(d) {
				return fmt.Errorf("source %s and target %s hold the same bytes (source: %s; target: %s), so the copy would overwrite what it reads: %w",
					src, dst, s.Via, d.Via, errdefs.ErrInvalidOptions)
			}
		}
	}
	return nil
}
