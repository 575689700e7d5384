package streamdecode

import (
	"bytes"
	"fmt"
	"sort"

	"github.com/diskimport/engine/errdefs"
)

// retention holds stream bytes that passed before anything claimed them:
// a data cluster ahead of its L2 table, a table ahead of the one pointing
// to it, or bytes nobody will ever claim (snapshot tables, bitmaps, data
// only a snapshot uses). It is bounded; all-zero pieces cost nothing, as
// they need no bytes to be reproduced.
type retention struct {
	segs  []segment // ascending, disjoint
	held  int64
	peak  int64
	total int64
	max   int64
	extra int64 // bookkeeping counted against max (regions still to come)
}

type segment struct {
	start uint64
	n     uint64
	data  []byte // nil: all zeros
}

func (s segment) end() uint64 { return s.start + s.n }

// maxSegments bounds the bookkeeping of many small retained pieces.
const maxSegments = 1 << 20

// add keeps p, the stream bytes at off (after every segment held).
func (t *retention) add(off uint64, p []byte, zeros []byte) error {
	zero := isZeroBytes(p, zeros)
	if k := len(t.segs); k > 0 {
		last := &t.segs[k-1]
		if last.end() == off && (last.data == nil) == zero {
			if !zero {
				if err := t.charge(len(p)); err != nil {
					return err
				}
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
		if err := t.charge(len(p)); err != nil {
			return err
		}
		s.data = append(make([]byte, 0, max(len(p), 64<<10)), p...)
	}
	t.segs = append(t.segs, s)
	return nil
}

func (t *retention) charge(n int) error {
	if t.held+t.extra+int64(n) > t.max {
		return fmt.Errorf("streamdecode: clusters arriving before the tables that map them, and tables far ahead of their clusters, need more than the %d-byte buffer: %w", t.max, errdefs.ErrNotStreamable)
	}
	t.held += int64(n)
	t.total += int64(n)
	t.peak = max(t.peak, t.held)
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

// each calls fn for the held pieces of [start, end) in order (data nil for
// zeros); the caller checked covers.
func (t *retention) each(start, end uint64, fn func(off uint64, data []byte, n uint64) error) error {
	for i := t.find(start); i < len(t.segs) && t.segs[i].start < end; i++ {
		s := t.segs[i]
		a, b := max(start, s.start), min(end, s.end())
		var p []byte
		if s.data != nil {
			p = s.data[a-s.start : b-s.start : b-s.start]
		}
		if err := fn(a, p, b-a); err != nil {
			return err
		}
	}
	return nil
}

// drop forgets [start, end). Slices handed out by each stay valid: the
// pieces kept are resliced with their capacity capped, never written.
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
			left := segment{start: s.start, n: k}
			if s.data != nil {
				left.data = s.data[:k:k]
			}
			out = append(out, left)
		}
		if s.end() > end {
			k := end - s.start
			right := segment{start: end, n: s.end() - end}
			if s.data != nil {
				right.data = s.data[k:s.n:s.n]
			}
			out = append(out, right)
		}
		if s.data != nil {
			a, b := max(start, s.start), min(end, s.end())
			t.held -= int64(b - a)
		}
	}
	t.segs = append(t.segs[:i], append(out, t.segs[j:]...)...)
}

func isZeroBytes(p, zeros []byte) bool {
	for len(p) > 0 {
		n := min(len(p), len(zeros))
		if !bytes.Equal(p[:n], zeros[:n]) {
			return false
		}
		p = p[n:]
	}
	return true
}
