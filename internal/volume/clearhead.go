//go:build linux

package volume

import (
	"fmt"

	"github.com/diskimport/engine/errdefs"
)

// ClearHead zeroes the first MiB of a block device and syncs it. The
// importer calls it when an import fails after a writer's Finish put the
// image's head on the device (a verification or the commit failed): before
// that the head was zeroed by wipeOldImage and the image's is still held in
// memory. It is a no-op for files (Abort removes them).
func (t *Target) ClearHead() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.kind != Block {
		return nil
	}
	if t.f == nil {
		return fmt.Errorf("clear head of %s: target closed: %w", t.path, errdefs.ErrInvalidOptions)
	}
	n := min(int64(headSize), t.capacity)
	n &^= int64(t.lbs - 1)
	// t.f is opened with O_DIRECT: the zero buffer is aligned.
	if _, err := t.f.WriteAt(alignedBuf(int(n)), 0); err != nil {
		return fmt.Errorf("zeroing the first %d bytes of %s: %w", n, t.path, err)
	}
	if err := t.f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", t.path, err)
	}
	return nil
}
