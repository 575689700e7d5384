package streamdecode

import (
	"container/heap"
	"fmt"

	"github.com/diskimport/engine/errdefs"
)

// region is a host byte range of the stream that something claims: a
// table to parse, a data cluster (or run of subclusters) to write, a
// compressed cluster to inflate, a refcount block to skip.
type region struct {
	start, end uint64
	at         uint64 // host offset of the next byte to feed (heap key)
	kind       regionKind
	guest      int64  // data: guest offset of start; compressed: of the cluster
	guestLen   int64  // data, compressed: guest bytes it yields (the last cluster may be short)
	index      uint64 // L2: its L1 index; compressed: guest cluster
	buf        []byte // tables, compressed: the bytes gathered so far
	got        uint64
}

type regionKind uint8

const (
	regL1 regionKind = iota
	regL2
	regRefTable
	regRefBlock
	regData
	regCompressed
	regSnapHeader // a snapshot table entry's fixed part
	regSnapBody   // its extra data, id and name
	regSnapL1     // a snapshot's L1 table
)

func (k regionKind) String() string {
	return [...]string{"L1 table", "L2 table", "refcount table", "refcount block", "data cluster", "compressed cluster",
		"snapshot table entry", "snapshot table entry", "snapshot L1 table"}[k]
}

// isMeta: the image's header and tables, which nothing else may share.
func (k regionKind) isMeta() bool { return k <= regRefTable || k >= regSnapHeader }

// claimsBehind: parsing it may register regions behind the sweep, served
// from the bytes retained: an L1 table (its L2 tables), an L2 table (its
// clusters), a snapshot table entry (the snapshot's L1 table, the next
// entry). A refcount table's blocks are skipped, whether they passed or
// not, and a snapshot's L1 table is only checked, so neither needs a byte
// kept. Once none is still to come, nothing passing is retained.
func (k regionKind) claimsBehind() bool {
	return k == regL1 || k == regL2 || k == regSnapHeader || k == regSnapBody
}

type regionHeap []*region

func (h regionHeap) Len() int           { return len(h) }
func (h regionHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h regionHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *regionHeap) Push(x any)        { *h = append(*h, x.(*region)) }
func (h *regionHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// sweep walks the stream forward once and hands every byte to the regions
// claiming it; bytes nobody claims yet are retained for a region that may
// be registered later.
type sweep struct {
	pos     uint64 // stream bytes swept so far
	pending regionHeap
	active  []*region
	kept    retention
	// claimers counts the regions registered and not yet wholly fed that
	// may claim bytes behind the sweep (claimsBehind). At zero nothing
	// can: what is held is dropped and what passes unclaimed is not kept
	// (data only a snapshot uses, leaked clusters, bytes no table refers
	// to before a refcount table).
	claimers int
	// meta are the host ranges of the header and tables, so a reference
	// into them is told apart from one into bytes already written out
	// (the first is a damaged image, the second a layout we do not
	// stream).
	meta        []metaSpan
	clusterBits uint32
	// fixed is bookkeeping that stays for the whole decode (the meta
	// ranges, the decoder's map of L2 tables), charged with the pending
	// regions against the memory bound.
	fixed int64
	// gathering is the buffers of compressed clusters whose bytes are
	// still arriving, charged against the memory bound too.
	gathering int64
	// feed consumes a piece of a region: p nil means n zero bytes.
	feed func(r *region, off uint64, p []byte, n uint64, c *chunk) error
}

// add registers a region. One that starts behind the sweep is served from
// the retained bytes, wholly or up to the sweep.
func (s *sweep) add(r *region) error {
	if r.kind.isMeta() && r.end > r.start {
		s.meta = append(s.meta, metaSpan{r.start, r.end})
		s.fixed += metaSpanCost
	}
	r.at = r.start
	if r.end <= r.start {
		return nil
	}
	if r.start < s.pos {
		past := min(r.end, s.pos)
		if !s.kept.covers(r.start, past) {
			return s.notHeld(r)
		}
		err := s.kept.eachChunk(r.start, past, func(off uint64, p []byte, n uint64, c *chunk) error {
			return s.feed(r, off, p, n, c)
		})
		if err != nil {
			return err
		}
		dropEnd := past
		if r.kind == regCompressed && past == r.end {
			// The last sector may also hold the start of the next
			// compressed cluster.
			dropEnd = max(r.start, (r.end-1)&^511)
		}
		s.kept.drop(r.start, dropEnd)
		if past == r.end {
			return nil
		}
		r.at = past
	}
	if err := s.charge(int64(len(s.pending)+1) * regionCost); err != nil {
		return fmt.Errorf("qcow2: %d clusters mapped ahead of the stream: %w", len(s.pending)+1, err)
	}
	if r.kind.claimsBehind() {
		s.claimers++
	}
	heap.Push(&s.pending, r)
	return nil
}

// charge counts pending, the bookkeeping of the regions waiting for their
// bytes, the fixed bookkeeping and the buffers being gathered against the
// memory bound.
func (s *sweep) charge(pending int64) error {
	s.kept.extra = pending + s.fixed + s.gathering
	return s.kept.reserve()
}

// gather charges n more bytes of buffers being gathered.
func (s *sweep) gather(n int64) error {
	s.gathering += n
	return s.charge(int64(len(s.pending)) * regionCost)
}

// gathered releases n bytes charged by gather.
func (s *sweep) gathered(n int64) {
	s.gathering -= n
	s.kept.extra -= n
}

// keep retains unclaimed bytes, unless nothing can claim them any more.
func (s *sweep) keep(off uint64, p []byte) error {
	if s.claimers == 0 {
		if len(s.kept.segs) > 0 {
			s.kept.reset()
		}
		return nil
	}
	return s.kept.add(off, p)
}

// regionCost is what a region waiting for its bytes costs in memory; it
// counts against the same bound as the bytes kept.
const regionCost = 128

// metaSpan is the host range of the header or a table.
type metaSpan struct{ start, end uint64 }

// Bookkeeping per table for the whole decode: its meta range, and an entry
// in a Go map (key, value and the map's slack).
const (
	metaSpanCost = 16
	mapEntryCost = 48
)

func (s *sweep) notHeld(r *region) error {
	mask := uint64(1)<<s.clusterBits - 1
	start, end := r.start&^mask, (r.end+mask)&^mask
	for _, m := range s.meta {
		// The clusters the region and the table lie in.
		if start < (m.end+mask)&^mask && m.start&^mask < end {
			return fmt.Errorf("qcow2: %s at host offset %#x..%#x overlaps the image's header or tables: %w", r.kind, r.start, r.end, errdefs.ErrInvalidImage)
		}
	}
	return fmt.Errorf("qcow2: %s at host offset %#x..%#x passed in the stream before its table and was not kept (it is used twice, or shares bytes with another cluster): %w", r.kind, r.start, r.end, errdefs.ErrNotStreamable)
}

// chunkAt sweeps the stream bytes p, at host offset s.pos, held in c.
func (s *sweep) chunkAt(p []byte, c *chunk) error {
	base := s.pos
	end := base + uint64(len(p))
	for cur := base; cur < end; {
		for len(s.pending) > 0 && s.pending[0].at <= cur {
			s.active = append(s.active, heap.Pop(&s.pending).(*region))
		}
		next := end
		if len(s.pending) > 0 {
			next = min(next, s.pending[0].at)
		}
		for _, a := range s.active {
			next = min(next, a.end)
		}
		piece := p[cur-base : next-base]
		s.pos = next
		if len(s.active) == 0 {
			if err := s.keep(cur, piece); err != nil {
				return err
			}
		} else {
			if err := s.checkOverlap(cur); err != nil {
				return err
			}
			if err := s.keepSharedTail(cur, piece); err != nil {
				return err
			}
			for _, a := range s.active {
				if err := s.feed(a, cur, piece, uint64(len(piece)), c); err != nil {
					return err
				}
			}
		}
		cur = next
		k := 0
		for _, a := range s.active {
			if a.end > cur {
				s.active[k] = a
				k++
			} else if a.kind.claimsBehind() {
				s.claimers--
			}
		}
		clear(s.active[k:])
		s.active = s.active[:k]
	}
	return nil
}

// checkOverlap refuses regions that claim the same bytes, except
// compressed clusters sharing a sector and a data cluster used twice.
func (s *sweep) checkOverlap(at uint64) error {
	if len(s.active) < 2 {
		return nil
	}
	k := s.active[0].kind
	for _, a := range s.active[1:] {
		if a.kind != k || (k != regData && k != regCompressed) {
			if a.kind.isMeta() || k.isMeta() {
				return fmt.Errorf("qcow2: a %s and a %s share host offset %#x: %w", k, a.kind, at, errdefs.ErrInvalidImage)
			}
			return fmt.Errorf("qcow2: a %s and a %s share host offset %#x: %w", k, a.kind, at, errdefs.ErrNotStreamable)
		}
	}
	return nil
}

// keepSharedTail also keeps the bytes of the last sector of the furthest
// compressed cluster when no region is known to start in it yet: the next
// compressed cluster may begin in that sector, and its table may still be
// to come.
func (s *sweep) keepSharedTail(cur uint64, piece []byte) error {
	var frontier uint64
	for _, a := range s.active {
		if a.kind != regCompressed {
			return nil
		}
		frontier = max(frontier, a.end)
	}
	next := cur + uint64(len(piece))
	from := max(cur, frontier-min(frontier, 512))
	if from >= next {
		return nil
	}
	if len(s.pending) > 0 && s.pending[0].at < frontier {
		return nil // the successor is known and will be fed its bytes
	}
	return s.keep(from, piece[from-cur:])
}
