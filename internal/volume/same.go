//go:build linux

package volume

import (
	"fmt"
	"os"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blockdev"
)

// RefuseSameVolume stops a copy of a volume onto itself: src and dst one
// file (under any name) or nodes of one block device. A name that cannot
// be read is not judged (a missing target is no copy of anything); a
// loop device and its backing file are not caught.
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
	return nil
}
