//go:build linux

package volume

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/internal/blockdev"
)

// Zeroer is the one way a range of a target is made to read zeros: a
// block device's (the sequential Writer's, the DeviceWriter's, a delta
// pass's) or a file's. It tries the ways in order, from concurrent
// requests too, and remembers for good which ones the target does not
// support.
//
// Punching a hole comes first when the caller may deallocate: on a block
// device the kernel turns it into a zero-out that may unmap but never
// falls back to writing, and fails when the device cannot guarantee zeros;
// thin storage (and a loop device's backing file) then frees the range, as
// qemu-img convert does, where BLKZEROOUT and ZERO_RANGE keep it allocated.
// In a file it leaves a hole.
type Zeroer struct {
	f     *os.File
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
	keepByWriting          // plain writes of a zero buffer
)

// NewZeroer zeroes ranges of f (a block device or a regular file, O_DIRECT
// or not), named path in messages; log (nil: none) hears of a way found
// unsupported.
func NewZeroer(f *os.File, path string, log *slog.Logger) *Zeroer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Zeroer{f: f, path: path, log: log, zeros: alignedBuf(headSize)}
}

// Zero makes [off, off+n) read zeros; on a block device, or through an
// O_DIRECT descriptor, off and n are multiples of the logical block size.
// mayDeallocate tries a punched hole first; fast accepts nothing else and
// fails with ENOTSUP.
func (z *Zeroer) Zero(off, n int64, mayDeallocate, fast bool) error {
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
			return z.WriteZeros(z.f, off, n)
		}
		if err == nil || !blockdev.IsUnsupported(err) {
			return err
		}
		if z.keeping.CompareAndSwap(way, way+1) {
			z.log.Info("zeroing method unsupported on target, trying the next one", "path", z.path, "error", err)
		}
	}
}

// WriteZeros writes n zero bytes at off through w, from the Zeroer's
// aligned buffer (so an O_DIRECT w takes them when off and n are
// aligned).
func (z *Zeroer) WriteZeros(w io.WriterAt, off, n int64) error {
	for n > 0 {
		c := min(n, int64(len(z.zeros)))
		if _, err := w.WriteAt(z.zeros[:c], off); err != nil {
			return fmt.Errorf("write %d zero bytes at offset %d to %s: %w", c, off, z.path, err)
		}
		off += c
		n -= c
	}
	return nil
}
