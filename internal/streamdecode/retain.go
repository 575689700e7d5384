package streamdecode

import (
	"fmt"
	"sort"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/iostage"
)

// retention holds stream bytes that passed before anything claimed them:
// a data cluster ahead of its L2 table, a table ahead of the one pointing
// to it, or bytes nobody will ever claim (bitmaps, data only a snapshot
// uses, leaked clusters). Memory is bounded by max; all-zero pieces cost
// nothing, as they need no bytes to be reproduced. With a spill directory,
// data that would pass the bound goes to a spill file there instead
// (spill), read back when it is claimed; without one, passing the bound
// is a *BufferError (errdefs.ErrNotStreamable).
type retention struct {
	segs  []segment // ascending, disjoint
	held  int64     // bytes in memory
	peak  int64
	total int64
	max   int64
	extra int64 // bookkeeping counted against max (regions still to come)
	spill spill
	// readPool recycles the buffers spilled bytes are read back into
	// (eachChunk); made on first use.
	readPool chan *chunk
}

// segment is a run of retained stream bytes: in memory (data), in the
// spill file (spilled, at fileOff), or all zeros (neither).
type segment struct {
	start   uint64
	n       uint64
	data    []byte
	spilled bool
	fileOff int64
}

// newRetention holds up to max bytes in memory and, with spillDir set,
// the rest in a spill file there, of at most spillMax bytes (0: no
// bound); close releases the file.
func newRetention(max int64, spillDir string, spillMax spillBound) retention {
	return retention{max: max, spill: spill{dir: spillDir, bound: spillMax}}
}

func (t *retention) close() { t.spill.close() }

func (s segment) end() uint64    { return s.start + s.n }
func (s segment) isZero() bool   { return s.data == nil && !s.spilled }
func (s segment) inMemory() bool { return s.data != nil }

// segBlock is the size past which a segment in memory is not grown.
const segBlock = 1 << 20

// maxSegments bounds the bookkeeping of many small retained pieces.
const maxSegments = 1 << 20

// BufferError is the decoder needing to hold more than Options.MaxBuffered
// bytes for clusters that arrive before their tables, with no spill
// directory to put them in. Need is the most it knew it needed (at least
// Max+1); the layout may need more further on.
type BufferError struct {
	Max, Need int64
	// Bookkeeping: what passed the bound is the record of regions
	// mapped ahead of the stream, which stays in memory: a spill
	// directory would not have helped.
	Bookkeeping bool
}

func (e *BufferError) Error() string {
	if e.Bookkeeping {
		return fmt.Sprintf("streamdecode: what the decoder must remember of the image's tables (the tables, and the clusters, grains or tables still to be accounted for) needs more than the %d-byte buffer (at least %d bytes): %s",
			e.Max, e.Need, errdefs.ErrNotStreamable)
	}
	return fmt.Sprintf("streamdecode: clusters arriving before the tables that map them, and tables far ahead of their clusters, need more than the %d-byte buffer (at least %d bytes) and no spill directory was given: %s",
		e.Max, e.Need, errdefs.ErrNotStreamable)
}

func (e *BufferError) Unwrap() error { return errdefs.ErrNotStreamable }

// add keeps p, the stream bytes at off (after every segment held).
func (t *retention) add(off uint64, p []byte) error {
	zero := iostage.IsZero(p)
	if !zero && !t.fits(len(p)) {
		if !t.spill.enabled() {
			return &BufferError{Max: t.max, Need: t.held + t.extra + int64(len(p))}
		}
		// Memory up to the bound, the rest to the spill file.
		if room := t.max - t.held - t.extra; room > 0 {
			if err := t.add(off, p[:room]); err != nil {
				return err
			}
			off, p = off+uint64(room), p[room:]
		}
		return t.addSpilled(off, p)
	}
	if k := len(t.segs); k > 0 {
		last := &t.segs[k-1]
		// A full block of data is not grown (append would copy it, and
		// hold twice its size meanwhile): the next bytes start another.
		grows := zero || len(last.data) < segBlock || cap(last.data)-len(last.data) >= len(p)
		if last.end() == off && !last.spilled && last.isZero() == zero && grows {
			if !zero {
				t.charge(len(p))
				last.data = append(last.data, p...)
			}
			last.n += uint64(len(p))
			return nil
		}
	}
	if len(t.segs) >= maxSegments {
		return fmt.Errorf("streamdecode: more than %d separate pieces held for tables still to come: %w", maxSegments, errdefs.ErrNotStreamable)
	}
	s := segment{start: off, n: uint64(len(p))}
	if !zero {
		t.charge(len(p))
		s.data = append(make([]byte, 0, max(len(p), 64<<10)), p...)
	}
	t.segs = append(t.segs, s)
	return nil
}

// addSpilled writes p to the spill file as the segment at off.
func (t *retention) addSpilled(off uint64, p []byte) error {
	at, err := t.spill.write(p)
	if err != nil {
		return err
	}
	if k := len(t.segs); k > 0 {
		last := &t.segs[k-1]
		if last.spilled && last.end() == off && last.fileOff+int64(last.n) == at {
			last.n += uint64(len(p))
			return nil
		}
	}
	if len(t.segs) >= maxSegments {
		return fmt.Errorf("streamdecode: more than %d separate pieces held for tables still to come: %w", maxSegments, errdefs.ErrNotStreamable)
	}
	t.segs = append(t.segs, segment{start: off, n: uint64(len(p)), spilled: true, fileOff: at})
	return nil
}

func (t *retention) fits(n int) bool { return t.held+t.extra+int64(n) <= t.max }

func (t *retention) charge(n int) {
	t.held += int64(n)
	t.total += int64(n)
	t.peak = max(t.peak, t.held)
}

// reserve makes room in memory for the bookkeeping in t.extra: with a
// spill file, the newest bytes in memory move there until it fits.
func (t *retention) reserve() error {
	for i := len(t.segs) - 1; i >= 0 && !t.fits(0) && t.spill.enabled(); i-- {
		s := &t.segs[i]
		if !s.inMemory() {
			continue
		}
		at, err := t.spill.write(s.data)
		if err != nil {
			return err
		}
		// Slices of s.data handed out by each stay valid: they are
		// only dropped here, never written.
		t.held -= int64(s.n)
		s.data, s.spilled, s.fileOff = nil, true, at
	}
	if !t.fits(0) {
		return &BufferError{Max: t.max, Need: t.held + t.extra, Bookkeeping: t.extra > t.max}
	}
	return nil
}

// covers reports whether every byte of [start, end) is held.
func (t *retention) covers(start, end uint64) bool {
	i := t.find(start)
	for at := start; at < end; i++ {
		if i >= len(t.segs) || t.segs[i].start > at {
			return false
		}
		at = t.segs[i].end()
	}
	return true
}

// find returns the index of the first segment ending after off.
func (t *retention) find(off uint64) int {
	return sort.Search(len(t.segs), func(i int) bool { return t.segs[i].end() > off })
}

// spillPiece is how much of a spilled segment is read back at once: the
// piece goes to the output queue, which bounds how many are in flight.
const spillPiece = 1 << 20

// spillReaders is how many read-back buffers eachChunk cycles through.
const spillReaders = 4

// each calls fn for the held pieces of [start, end) in order (data nil for
// zeros); the caller checked covers. Spilled bytes are read back into
// fresh buffers, a piece at a time, which fn may keep.
func (t *retention) each(start, end uint64, fn func(off uint64, data []byte, n uint64) error) error {
	return t.walk(start, end, false, func(off uint64, p []byte, n uint64, _ *chunk) error { return fn(off, p, n) })
}

// eachChunk is each, but spilled bytes come in a few reused buffers: fn
// must take a reference on c (chunk.ref) to keep p past its return, and
// the buffer is reused once the last reference is dropped.
func (t *retention) eachChunk(start, end uint64, fn func(off uint64, data []byte, n uint64, c *chunk) error) error {
	return t.walk(start, end, true, fn)
}

func (t *retention) walk(start, end uint64, pooled bool, fn func(off uint64, data []byte, n uint64, c *chunk) error) error {
	for i := t.find(start); i < len(t.segs) && t.segs[i].start < end; i++ {
		s := t.segs[i]
		a, b := max(start, s.start), min(end, s.end())
		if s.spilled {
			for at := a; at < b; {
				k := min(b-at, spillPiece)
				var c *chunk
				if pooled {
					c = t.reader()
				} else {
					c = &chunk{buf: make([]byte, k)}
				}
				c.refs.Store(1)
				p := c.buf[:k]
				err := t.spill.read(p, s.fileOff+int64(at-s.start))
				if err == nil {
					err = fn(at, p, k, c)
				}
				if pooled {
					c.unref()
				}
				if err != nil {
					return err
				}
				at += k
			}
			continue
		}
		var p []byte
		if s.data != nil {
			p = s.data[a-s.start : b-s.start : b-s.start]
		}
		if err := fn(a, p, b-a, nil); err != nil {
			return err
		}
	}
	return nil
}

// reader takes a read-back buffer, waiting for the output stage to give
// one back when all are in flight.
func (t *retention) reader() *chunk {
	if t.readPool == nil {
		t.readPool = make(chan *chunk, spillReaders)
		for range spillReaders {
			t.readPool <- &chunk{buf: make([]byte, spillPiece), pool: t.readPool}
		}
	}
	return <-t.readPool
}

// drop forgets [start, end). Slices handed out by each stay valid: the
// pieces kept are resliced with their capacity capped, never written.
// Spilled bytes dropped are punched out of the spill file.
func (t *retention) drop(start, end uint64) {
	if start >= end {
		return
	}
	i := t.find(start)
	var out []segment
	j := i
	for ; j < len(t.segs) && t.segs[j].start < end; j++ {
		s := t.segs[j]
		if s.start < start {
			k := start - s.start
			left := s
			left.n = k
			if s.data != nil {
				left.data = s.data[:k:k]
			}
			out = append(out, left)
		}
		if s.end() > end {
			k := end - s.start
			right := s
			right.start, right.n = end, s.end()-end
			if s.data != nil {
				right.data = s.data[k:s.n:s.n]
			}
			if s.spilled {
				right.fileOff = s.fileOff + int64(k)
			}
			out = append(out, right)
		}
		a, b := max(start, s.start), min(end, s.end())
		switch {
		case s.data != nil:
			t.held -= int64(b - a)
		case s.spilled:
			t.spill.free(s.fileOff+int64(a-s.start), int64(b-a))
		}
	}
	t.segs = append(t.segs[:i], append(out, t.segs[j:]...)...)
}

// reset forgets everything held: nothing can claim it any more.
func (t *retention) reset() {
	for _, s := range t.segs {
		if s.spilled {
			t.spill.free(s.fileOff, int64(s.n))
		}
	}
	t.segs, t.held = nil, 0
}
