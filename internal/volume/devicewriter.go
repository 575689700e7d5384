//go:build linux

package volume

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/iostage"
)

// DeviceWriter writes a block target at random offsets, for a converter
// that writes out of order (qemu-img, through an NBD export of the target
// served by the importer, and the stream decoder). Like the sequential
// Writer it zeroes the old image's head before its first write to the
// device (Target.wipeOldImage), holds the first MiB back in memory and
// writes it only in Finish, after the rest was written and fsynced: if the
// import dies at any moment before that, even by SIGKILL, the device
// carries neither the image's boot sector nor the old one.
//
// Offsets at or past the first MiB go straight to the device through the
// target's O_DIRECT descriptor. A write that covers only part of a logical
// block is merged with the block's current content (read-modify-write,
// serialised, also O_DIRECT), so nothing goes through the page cache and
// no cached page can later overwrite a direct write. Data that is all
// zeros and zero requests become the device's zeroing (Zeroer).
//
// All methods may be called concurrently; writes to overlapping ranges
// land in an unspecified order, as on any disk.
type DeviceWriter struct {
	t        *Target
	ctx      context.Context
	dev      *os.File // the target's claimed O_DIRECT descriptor
	capacity int64
	lbs      int64
	zeros    []byte // aligned, read-only
	zero     *Zeroer
	// keepAllocated: all-zero data is zeroed without deallocating.
	keepAllocated bool

	headMu sync.Mutex
	head   []byte // the image's first bytes; zeros until written

	rmwMu sync.Mutex // one read-modify-write of partial blocks at a time

	// Writes hold stateMu shared; Finish holds it exclusively, so it sees
	// no write in flight and none starts after it.
	stateMu  sync.RWMutex
	finished bool

	written atomic.Int64
	data    atomic.Int64

	// changes counts completed requests that changed the device; synced
	// is the count the last completed Sync covered. Finish skips its own
	// fsync when the converter's final flush already covered everything.
	changes atomic.Uint64
	synced  atomic.Uint64
}

// DeviceWriterOptions configure NewDeviceWriter.
type DeviceWriterOptions struct {
	// KeepAllocated zeroes all-zero data writes without deallocating
	// (preallocation: the converter was told to write every block).
	KeepAllocated bool
}

// NewDeviceWriter returns a random-access writer of a block target. Writes
// fail with errdefs.ErrCancelled once ctx ends. The target must stay open
// until the writer is finished or abandoned.
func (t *Target) NewDeviceWriter(ctx context.Context, o DeviceWriterOptions) (*DeviceWriter, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.kind != Block {
		return nil, fmt.Errorf("device writer for %s: not a block device: %w", t.path, errdefs.ErrInvalidOptions)
	}
	if t.done || t.f == nil {
		return nil, fmt.Errorf("device writer for %s: target already committed, aborted or closed: %w", t.path, errdefs.ErrInvalidOptions)
	}
	zero := NewZeroer(t.f, t.path, t.log)
	return &DeviceWriter{
		t:             t,
		ctx:           ctx,
		keepAllocated: o.KeepAllocated,
		dev:           t.f,
		capacity:      t.capacity,
		lbs:           int64(t.lbs),
		zeros:         zero.zeros,
		zero:          zero,
		head:          alignedBuf(int(min(headSize, t.capacity))),
	}, nil
}

// Size returns the device's size, the export's size.
func (w *DeviceWriter) Size() int64 { return w.capacity }

// BlockSize returns the device's logical block size: requests aligned to it
// take the direct path.
func (w *DeviceWriter) BlockSize() int64 { return w.lbs }

// Written returns the bytes accepted so far, data and zeros (for progress).
func (w *DeviceWriter) Written() int64 { return w.written.Load() }

// DataBytes returns the bytes of data written to the device so far, zero
// ranges not included; the held-back head counts once Finish wrote it.
func (w *DeviceWriter) DataBytes() int64 { return w.data.Load() }

// begin admits one request on [off, off+n): the writer is not finished,
// its context is alive and the range is inside the device. On success the
// caller must call w.stateMu.RUnlock when done.
func (w *DeviceWriter) begin(op string, off, n int64) error {
	w.stateMu.RLock()
	var err error
	switch {
	case w.finished:
		err = fmt.Errorf("%s %s: device writer already finished: %w", op, w.t.path, errdefs.ErrInvalidOptions)
	case w.ctx.Err() != nil:
		err = fmt.Errorf("%s %s stopped: %w: %w", op, w.t.path, errdefs.ErrCancelled, w.ctx.Err())
	case off < 0 || n < 0 || off > w.capacity || n > w.capacity-off:
		err = fmt.Errorf("%s %s: [%d, +%d) passes the end of the device (%d bytes): %w", op, w.t.path, off, n, w.capacity, unix.ENOSPC)
	}
	if err != nil {
		w.stateMu.RUnlock()
	}
	return err
}

// WriteAt writes p at off: the part inside the first MiB to memory, the
// rest to the device.
func (w *DeviceWriter) WriteAt(p []byte, off int64) (int, error) {
	if err := w.begin("write", off, int64(len(p))); err != nil {
		return 0, err
	}
	defer w.stateMu.RUnlock()
	body, bodyOff := w.holdHead(p, off)
	if len(body) > 0 {
		if err := w.t.wipeOldImage(); err != nil {
			return 0, err
		}
		var err error
		if iostage.IsZero(body) {
			err = w.zeroBody(bodyOff, int64(len(body)), !w.keepAllocated, false)
		} else {
			err = w.writeBody(body, bodyOff)
		}
		if err != nil {
			return 0, err
		}
		w.changes.Add(1)
	}
	w.written.Add(int64(len(p)))
	return len(p), nil
}

// holdHead copies the part of p that falls inside the head and returns
// the rest with its offset.
func (w *DeviceWriter) holdHead(p []byte, off int64) ([]byte, int64) {
	headLen := int64(len(w.head))
	if off >= headLen {
		return p, off
	}
	k := min(int64(len(p)), headLen-off)
	w.headMu.Lock()
	copy(w.head[off:], p[:k])
	w.headMu.Unlock()
	return p[k:], off + k
}

// writeBody writes p at off (past the head): whole blocks directly, partial
// blocks at either end by read-modify-write.
func (w *DeviceWriter) writeBody(p []byte, off int64) error {
	end := off + int64(len(p))
	first, last, mid := wholeBlocks(p, off, w.lbs)
	if first >= last {
		return w.mergeBlocks(p, off)
	}
	if off < first {
		if err := w.mergeBlocks(p[:first-off], off); err != nil {
			return err
		}
	}
	if _, err := w.dev.WriteAt(mid, first); err != nil {
		return fmt.Errorf("write %d bytes at offset %d to %s: %w", len(mid), first, w.t.path, err)
	}
	w.data.Add(int64(len(mid)))
	if last < end {
		return w.mergeBlocks(p[last-off:], last)
	}
	return nil
}

// wholeBlocks finds the whole blocks of lbs bytes in a write of p at off:
// they are [first, last) of the target, and mid holds their bytes at an
// address O_DIRECT takes (bounced when p's blocks do not start on one,
// after a write at an unaligned offset). first >= last when p covers no
// whole block; the partial blocks at either end are the caller's.
func wholeBlocks(p []byte, off, lbs int64) (first, last int64, mid []byte) {
	first, last = roundUp(off, lbs), roundDown(off+int64(len(p)), lbs)
	if first >= last {
		return first, last, nil
	}
	mid = p[first-off : last-off]
	if uintptr(unsafe.Pointer(&mid[0]))&uintptr(lbs-1) != 0 {
		b := alignedBuf(len(mid))
		copy(b, mid)
		mid = b
	}
	return first, last, mid
}

// mergeBlocks writes p at off by reading the blocks it touches, patching
// them and writing them back.
func (w *DeviceWriter) mergeBlocks(p []byte, off int64) error {
	start, end := roundDown(off, w.lbs), roundUp(off+int64(len(p)), w.lbs)
	buf := alignedBuf(int(end - start))
	w.rmwMu.Lock()
	defer w.rmwMu.Unlock()
	if _, err := w.dev.ReadAt(buf, start); err != nil {
		return fmt.Errorf("read %d bytes at offset %d of %s to merge a partial write: %w", len(buf), start, w.t.path, err)
	}
	copy(buf[off-start:], p)
	if _, err := w.dev.WriteAt(buf, start); err != nil {
		return fmt.Errorf("write %d bytes at offset %d to %s: %w", len(buf), start, w.t.path, err)
	}
	w.data.Add(int64(len(p)))
	return nil
}

// ZeroAt makes [off, off+n) read as zeros: in memory for the head, by the
// device's zeroing for whole blocks past it. fast refuses (with an error
// wrapping ENOTSUP) when the device can only zero by writing.
func (w *DeviceWriter) ZeroAt(off, n int64, mayDeallocate, fast bool) error {
	if err := w.begin("zero", off, n); err != nil {
		return err
	}
	defer w.stateMu.RUnlock()
	if headLen := int64(len(w.head)); off < headLen {
		k := min(n, headLen-off)
		w.headMu.Lock()
		clear(w.head[off : off+k])
		w.headMu.Unlock()
		off, n = off+k, n-k
	}
	if n > 0 {
		if err := w.t.wipeOldImage(); err != nil {
			return err
		}
		if err := w.zeroBody(off, n, mayDeallocate, fast); err != nil {
			return err
		}
		w.changes.Add(1)
	}
	w.written.Add(n)
	return nil
}

// zeroBody zeroes [off, off+n) past the head: whole blocks by the device,
// partial blocks at either end by read-modify-write.
func (w *DeviceWriter) zeroBody(off, n int64, mayDeallocate, fast bool) error {
	end := off + n
	first, last := roundUp(off, w.lbs), roundDown(end, w.lbs)
	if first >= last {
		return w.mergeZeros(off, n)
	}
	if off < first {
		if err := w.mergeZeros(off, first-off); err != nil {
			return err
		}
	}
	if err := w.zero.Zero(first, last-first, mayDeallocate, fast); err != nil {
		return err
	}
	if last < end {
		return w.mergeZeros(last, end-last)
	}
	return nil
}

// mergeZeros zeroes a range shorter than a block (it lies in at most two).
func (w *DeviceWriter) mergeZeros(off, n int64) error {
	if err := w.mergeBlocks(w.zeros[:n], off); err != nil {
		return err
	}
	w.data.Add(-n) // zeros, not data
	return nil
}

// ReadAt reads what the device will hold: the head from memory, the rest
// from the device.
func (w *DeviceWriter) ReadAt(p []byte, off int64) (int, error) {
	if err := w.begin("read", off, int64(len(p))); err != nil {
		return 0, err
	}
	defer w.stateMu.RUnlock()
	n := 0
	if headLen := int64(len(w.head)); off < headLen {
		w.headMu.Lock()
		n = copy(p, w.head[off:])
		w.headMu.Unlock()
	}
	if n == len(p) {
		return n, nil
	}
	off += int64(n)
	start, end := roundDown(off, w.lbs), roundUp(off+int64(len(p)-n), w.lbs)
	buf := alignedBuf(int(end - start))
	if _, err := w.dev.ReadAt(buf, start); err != nil {
		return n, fmt.Errorf("read %d bytes at offset %d of %s: %w", len(buf), start, w.t.path, err)
	}
	return n + copy(p[n:], buf[off-start:]), nil
}

// Sync makes every completed write durable on the device (the head stays
// in memory until Finish).
func (w *DeviceWriter) Sync() error {
	covered := w.changes.Load()
	if err := unix.Fdatasync(int(w.dev.Fd())); err != nil {
		return fmt.Errorf("fsync %s: %w", w.t.path, err)
	}
	for {
		old := w.synced.Load()
		if old >= covered || w.synced.CompareAndSwap(old, covered) {
			return nil
		}
	}
}

// Finish ends the writer: it waits for writes in flight, refuses any
// later one, fsyncs the device and only then writes the held-back head.
// The head is made durable by Target.Commit, or zeroed again by
// Target.Abort. Call it only after the converter succeeded; on failure
// just drop the writer.
func (w *DeviceWriter) Finish(ctx context.Context) error {
	w.stateMu.Lock()
	defer w.stateMu.Unlock()
	if w.finished {
		return fmt.Errorf("finish %s: device writer already finished: %w", w.t.path, errdefs.ErrInvalidOptions)
	}
	w.finished = true
	cancelled := func() error {
		for _, c := range []context.Context{ctx, w.ctx} {
			if err := c.Err(); err != nil {
				return fmt.Errorf("writing image to %s stopped: %w: %w", w.t.path, errdefs.ErrCancelled, err)
			}
		}
		return nil
	}
	if err := cancelled(); err != nil {
		return err
	}
	// An image that lies within the head wrote nothing yet: the old
	// image's backup GPT still goes first.
	if err := w.t.wipeOldImage(); err != nil {
		return err
	}
	if w.changes.Load() != w.synced.Load() {
		if err := w.Sync(); err != nil {
			return err
		}
	}
	// A cancel during the fsync must still keep the head off the device.
	if err := cancelled(); err != nil {
		return err
	}
	w.t.headOnDevice.Store(true) // from the first byte of it on
	if _, err := w.dev.WriteAt(w.head, 0); err != nil {
		return fmt.Errorf("write the first %d bytes of %s: %w", len(w.head), w.t.path, err)
	}
	w.data.Add(int64(len(w.head)))
	w.t.log.Debug("image head written after the rest was synced", "path", w.t.path, "data_bytes", w.data.Load())
	return nil
}

func roundDown(v, a int64) int64 { return v &^ (a - 1) }
func roundUp(v, a int64) int64   { return (v + a - 1) &^ (a - 1) }
