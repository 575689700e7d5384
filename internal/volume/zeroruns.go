//go:build linux

package volume

import (
	"io"

	"github.com/diskimport/engine/internal/iostage"
)

// WriteZeros accepts n zero bytes at the current offset without their
// bytes, for a source that knows where its zeros are (a clone's zero
// records): the run becomes a hole in a file and a zeroed range of a
// device (nothing on a target known to be zero), and the content digest
// takes it as zeros, neither expanded nor scanned. Zeros up to the next
// granule, and those after the last whole one, go through the staged
// chunk like data, so chunks still start on granules. A run that would pass Capacity is refused with
// errdefs.ErrTargetTooSmall.
func (w *Writer) WriteZeros(n int64) error {
	if err := w.check(); err != nil {
		return err
	}
	if n <= 0 {
		return nil
	}
	if w.off+n > w.capacity {
		return w.fail(w.tooSmall(w.off + n))
	}
	if r := w.off % granule; r != 0 {
		k := min(n, granule-r)
		if _, err := w.Write(w.zero.zeros[:k]); err != nil {
			return err
		}
		if n -= k; n == 0 {
			return nil
		}
	}
	// And so do those past the last whole granule: the next chunk starts
	// on a granule too.
	tail := (w.off + n) % granule
	n -= tail
	if n > 0 {
		if err := w.zeroGranules(n); err != nil {
			return err
		}
	}
	if tail > 0 {
		if _, err := w.Write(w.zero.zeros[:tail]); err != nil {
			return err
		}
	}
	return nil
}

// zeroGranules is WriteZeros of n bytes, a multiple of granule, from a
// granule boundary. The chunk staged before the run and the run itself
// are handed off together, as a full chunk is (applied in order after
// the hand-offs before them), so the caller reads its next run while they
// are written: a clone's 1 MiB data records between zero runs were each
// written while the connection waited (a 35 % source onto a file, 716 of
// them at about 1 ms each).
func (w *Writer) zeroGranules(n int64) error {
	buf, used := w.stage, w.stageLen
	w.stage, w.stageLen = nil, 0
	off := w.off
	w.off += n
	w.written.Add(n)
	return w.startInflight(buf, func() error {
		if buf != nil {
			if err := w.processChunk(off-int64(used), buf[:used]); err != nil {
				return err
			}
		}
		return w.applyZeros(off, n)
	})
}

// applyZeros takes the zero granules [off, off+n) into the digest, the
// held-back head and the pending zero run.
func (w *Writer) applyZeros(off, n int64) error {
	if w.hash != nil {
		w.hash.Zero(n)
	}
	if off < headSize {
		h := min(n, headSize-off)
		clear(w.head[off : off+h])
		w.headLen = max(w.headLen, int(off+h))
		off, n = off+h, n-h
	}
	// A run is zeroed maxZeroRun at a time, the context checked between.
	for n > 0 {
		if err := w.ctx.Err(); err != nil {
			return w.cancelled(err)
		}
		k := min(n, maxZeroRun)
		if err := w.addZero(off, k); err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return nil
}

// readRuns is ReadFrom of a stream that knows where its zeros are: its
// data is read straight into the staged chunk (written on the hand-off
// goroutines as Write's chunks are) and its runs of zeros are taken as
// WriteZeros takes them, never expanded or scanned. The decoder behind
// such a stream is a child process, so no read-ahead goroutine is needed
// to keep it apart from the writes.
func (w *Writer) readRuns(r iostage.RunReader) (int64, error) {
	var total int64
	for {
		if err := w.ctx.Err(); err != nil {
			return total, w.fail(w.cancelled(err))
		}
		if w.stage == nil {
			w.stage, w.stageLen = w.takeBuf(), 0
		}
		n, zeros, err := r.ReadRun(w.stage[w.stageLen:])
		if n > 0 {
			if w.off+int64(n) > w.capacity {
				return total, w.fail(w.tooSmall(w.off + int64(n)))
			}
			total += int64(n)
			if serr := w.staged(n); serr != nil {
				return total, serr
			}
		}
		if zeros > 0 {
			if zerr := w.WriteZeros(zeros); zerr != nil {
				return total, zerr
			}
			total += zeros
		}
		switch {
		case err == io.EOF: //nolint:errorlint // exact, as ReadFrom's
			return total, nil
		case err != nil:
			if cerr := w.ctx.Err(); cerr != nil {
				return total, w.fail(w.cancelled(cerr))
			}
			return total, w.fail(w.sourceErr(err, w.off))
		}
	}
}
