//go:build linux

package volume

import (
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/internal/blockdev"
)

// deviceZeroer zeroes block-aligned ranges of a block device for the
// DeviceWriter, from concurrent requests. It tries the same ways as the
// sequential Writer (Writer.emit) and remembers for good which ones the
// device does not support.
type deviceZeroer struct {
	f     *os.File // O_DIRECT
	path  string
	log   *slog.Logger
	zeros []byte // aligned, read-only

	noPunch atomic.Bool  // punching a hole is unsupported
	keeping atomic.Int32 // the first way that keeps blocks allocated and may still work
}

// Ways that zero without deallocating, in the order tried.
const (
	keepByIoctl     = iota // BLKZEROOUT (the kernel passes NOUNMAP)
	keepByFallocate        // fallocate(FALLOC_FL_ZERO_RANGE)
	keepByWriting          // plain O_DIRECT writes of a zero buffer
)

// zero makes [off, off+n) read zeros. mayDeallocate tries a punched hole
// first (on a block device a zero-out that may unmap and never falls back
// to writing: thin storage, and a loop device's file, free the range, as
// qemu-img does). fast accepts nothing else and fails with ENOTSUP.
func (z *deviceZeroer) zero(off, n int64, mayDeallocate, fast bool) error {
	if mayDeallocate || fast {
		if !z.noPunch.Load() {
			err := unix.Fallocate(int(z.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
			if err == nil {
				return nil
			}
			if !blockdev.IsUnsupported(err) {
				return fmt.Errorf("fallocate(PUNCH_HOLE) %s [%d, +%d): %w", z.path, off, n, err)
			}
			if !z.noPunch.Swap(true) {
				z.log.Info("punching holes unsupported on target, zeroing without deallocating", "path", z.path, "error", err)
			}
		}
		if fast {
			return fmt.Errorf("zero %s [%d, +%d) quickly: %w", z.path, off, n, unix.ENOTSUP)
		}
	}
	for {
		way := z.keeping.Load()
		var err error
		switch way {
		case keepByIoctl:
			err = blockdev.ZeroOut(z.f, off, n)
		case keepByFallocate:
			err = unix.Fallocate(int(z.f.Fd()), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, n)
			if err != nil {
				err = fmt.Errorf("fallocate(ZERO_RANGE) %s [%d, +%d): %w", z.path, off, n, err)
			}
		default:
			return z.write(off, n)
		}
		if err == nil || !blockdev.IsUnsupported(err) {
			return err
		}
		if z.keeping.CompareAndSwap(way, way+1) {
			z.log.Info("zeroing method unsupported on target, trying the next one", "path", z.path, "error", err)
		}
	}
}

func (z *deviceZeroer) write(off, n int64) error {
	for n > 0 {
		c := min(n, int64(len(z.zeros)))
		if _, err := z.f.WriteAt(z.zeros[:c], off); err != nil {
			return fmt.Errorf("write %d zero bytes at offset %d to %s: %w", c, off, z.path, err)
		}
		off += c
		n -= c
	}
	return nil
}
