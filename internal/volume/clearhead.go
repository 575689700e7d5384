//go:build linux

package volume

import (
	"fmt"
)

// clearHeadLocked zeroes the first MiB of a block device and syncs it:
// Abort calls it when a writer's Finish had put the image's head on the
// device and the import failed after all (a verification or the commit).
// Before Finish the device's head was zeroed by wipeOldImage and the
// image's was still held in memory. t.mu is held.
func (t *Target) clearHeadLocked() error {
	n := min(int64(headSize), t.capacity)
	n &^= int64(t.lbs - 1)
	// t.f is opened with O_DIRECT: the zero buffer is aligned.
	if _, err := t.f.WriteAt(alignedBuf(int(n)), 0); err != nil {
		return fmt.Errorf("zeroing the first %d bytes of %s: %w", n, t.path, err)
	}
	if err := t.f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", t.path, err)
	}
	t.log.Info("Wiped the first MiB of the failed target so it does not look bootable", "target", t.path)
	return nil
}
