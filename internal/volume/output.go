//go:build linux

package volume

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/iostage"
)

// processChunk handles one chunk at image offset off: the part inside the
// first MiB is only copied to the held-back head, the rest is emitted.
// Chunks arrive in order, each starting where the last ended, at a
// multiple of granule. Each granule is scanned for zeros once, for both
// the writes and the content digest.
func (w *Writer) processChunk(off int64, buf []byte) error {
	zero := w.scanZeros(buf)
	if w.hash != nil {
		// Chunks come in image order; the hash reads buf on other cores
		// while it is written, and is done with it before buf is reused.
		defer w.hash.StartScanned(buf, zero)()
	}
	if off < headSize {
		h := min(int64(len(buf)), headSize-off)
		copy(w.head[off:], buf[:h])
		w.headLen = max(w.headLen, int(off+h))
		if h == int64(len(buf)) {
			return nil
		}
		// headSize and off are multiples of granule, so h is too.
		buf, zero = buf[h:], zero[h/granule:]
		off += h
	}
	return w.emit(off, buf, zero)
}

// The content digest's blocks are the writer's granules, so one scan
// serves both.
const _ = uint(granule-blkhash.BlockSize) + uint(blkhash.BlockSize-granule)

// scanZeros tells for each granule of p (the last may be short) whether
// it holds only zeros, in a slice reused by the next call.
func (w *Writer) scanZeros(p []byte) []bool {
	n := (len(p) + granule - 1) / granule
	if cap(w.zeroMap) < n {
		w.zeroMap = make([]bool, n)
	}
	zero := w.zeroMap[:n]
	for i := range zero {
		zero[i] = iostage.IsZero(p[i*granule : min((i+1)*granule, len(p))])
	}
	return zero
}

// emit splits p (at image offset off, a multiple of granule) into runs of
// data granules and zero granules, as zero tells them; data is written,
// zero runs are coalesced.
func (w *Writer) emit(off int64, p []byte, zero []bool) error {
	for g := 0; g < len(zero); {
		end := g + 1
		for end < len(zero) && zero[end] == zero[g] {
			end++
		}
		i, j := g*granule, min(end*granule, len(p))
		var err error
		if zero[g] {
			err = w.addZero(off+int64(i), int64(j-i))
		} else if err = w.flushZero(); err == nil {
			err = w.writeData(off+int64(i), p[i:j])
		}
		if err != nil {
			return err
		}
		g = end
	}
	return nil
}

func (w *Writer) addZero(off, n int64) error {
	if w.zLen > 0 && w.zStart+w.zLen == off && w.zLen+n <= maxZeroRun {
		w.zLen += n
		return nil
	}
	if err := w.flushZero(); err != nil {
		return err
	}
	w.zStart, w.zLen = off, n
	return nil
}

// flushZero materialises the pending zero run: nothing for files (it stays a
// hole in the new file) or for a target known to be zero.
func (w *Writer) flushZero() error {
	off, n := w.zStart, w.zLen
	w.zStart, w.zLen = 0, 0
	if n == 0 || w.t.kind == File || w.targetIsZero {
		return nil
	}
	return w.zeroRange(off, n)
}

// writeData writes p at off. The block-aligned part goes through the
// O_DIRECT descriptor (p starts at an aligned address: chunk and
// head buffers are aligned and runs start on granule boundaries) and an
// unaligned remainder through the buffered one.
func (w *Writer) writeData(off int64, p []byte) error {
	if err := w.wipeOldImage(); err != nil {
		return err
	}
	al := int64(len(p)) &^ (w.lbs - 1)
	if al > 0 {
		_, err := w.out.WriteAt(p[:al], off)
		if err != nil && w.ownOut && errors.Is(err, unix.EINVAL) {
			// A file system that accepted O_DIRECT at open but wants a
			// larger alignment: go on through the page cache.
			w.log.Info("O_DIRECT write refused on file target, falling back to buffered writes", "path", w.t.writePath, "error", err)
			w.out.Close()
			w.out, w.ownOut, w.lbs, al = w.t.f, false, 1, int64(len(p))
			_, err = w.out.WriteAt(p, off)
		}
		if err != nil {
			return fmt.Errorf("write %d bytes at offset %d to %s: %w", al, off, w.t.writePath, err)
		}
	}
	if rest := p[al:]; len(rest) > 0 {
		if _, err := w.buffered.WriteAt(rest, off+al); err != nil {
			return fmt.Errorf("write %d-byte unaligned tail at offset %d to %s: %w", len(rest), off+al, w.t.writePath, err)
		}
	}
	w.data.Add(int64(len(p)))
	if w.pacer != nil {
		return w.pacer.wrote(off + int64(len(p)))
	}
	return nil
}

// wipeOldImage clears the old image's head before the Writer's first
// write to a block device (Target.wipeOldImage).
func (w *Writer) wipeOldImage() error {
	if w.oldImageWiped {
		return nil
	}
	if err := w.t.wipeOldImage(); err != nil {
		return err
	}
	w.oldImageWiped = true
	return nil
}

// zeroRange makes [off, off+n) of the block device read zeros (the
// Zeroer, deallocating where it can). off is block aligned; an unaligned
// remainder (only at the very end of the image) is written as zeros
// through the buffered descriptor.
func (w *Writer) zeroRange(off, n int64) error {
	if err := w.wipeOldImage(); err != nil {
		return err
	}
	if al := n &^ (w.lbs - 1); al > 0 {
		if err := w.zero.Zero(off, al, true, false); err != nil {
			return err
		}
		off, n = off+al, n-al
	}
	if n > 0 {
		return w.zero.WriteZeros(w.buffered, off, n)
	}
	return nil
}
