//go:build linux

package volume

import (
	"context"
	"fmt"
	"os"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blockdev"
)

// ZeroAll makes the whole block target read zeros with BLKZEROOUT and
// syncs it. Where the device does not support that, it writes zeros when
// writeFallback is set (a preallocated blank disk), and otherwise returns
// the error so the caller can do without (a clone then writes zero runs
// itself). It uses a second, non-exclusive descriptor: the target holds the
// exclusive claim. A file target is refused.
func (t *Target) ZeroAll(ctx context.Context, writeFallback bool) error {
	if t.kind != Block {
		return fmt.Errorf("zeroing %s: not a block device: %w", t.path, errdefs.ErrInvalidOptions)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", errdefs.ErrCancelled, err)
	}
	f, err := os.OpenFile(t.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("opening %s to zero it: %w", t.path, err)
	}
	defer f.Close()
	size := t.capacity
	zerr := blockdev.ZeroOut(f, 0, size)
	switch {
	case zerr == nil:
		t.log.Info("Zeroed block target with BLKZEROOUT", "target", t.path, "bytes", size)
	case writeFallback && blockdev.IsUnsupported(zerr):
		t.log.Info("BLKZEROOUT unsupported, writing zeros", "target", t.path, "err", zerr)
		if err := writeZeros(ctx, f, t.path, size); err != nil {
			return fmt.Errorf("zeroing %s: %w", t.path, err)
		}
	default:
		return zerr
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", t.path, err)
	}
	return nil
}

// writeZeros writes size zero bytes from offset 0 (the Zeroer's writes),
// checking ctx between pieces so a large device can be cancelled.
func writeZeros(ctx context.Context, f *os.File, path string, size int64) error {
	const piece = 64 << 20
	z := NewZeroer(f, path, nil)
	for off := int64(0); off < size; off += piece {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: %w", errdefs.ErrCancelled, err)
		}
		if err := z.WriteZeros(f, off, min(piece, size-off)); err != nil {
			return err
		}
	}
	return nil
}
