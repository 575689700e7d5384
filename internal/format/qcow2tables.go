package format

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"sync"
)

// The qcow2 tables (qcow2 specification), decoded once for the structural
// check (CheckQCOW2), the route choice's layout (ReadQCOW2Layout) and the
// stream decoder: each entry's bits mean the same and are refused for the
// same reasons, in the same words, by all three.

const (
	qcow2Subclusters = 32 // per cluster, with extended L2 entries
	// qcow2TablesInFlight L2 tables are read at once by the walker: over
	// HTTP each is a round trip (5 ms for the 2 GiB bench image's tables
	// 4 at a time), on a local file they come from the page cache anyway.
	qcow2TablesInFlight = 4
)

// QCOW2L1Entry decodes entry i of an L1 table: the offset of its L2 table
// (0: none), refused when reserved bits are set or it is not cluster
// aligned.
func QCOW2L1Entry(h Header, i, e uint64) (uint64, error) {
	if e&QCOW2L1Reserved != 0 {
		return 0, invalidf(QCOW2, "L1 entry %d (%#x) has reserved bits set", i, e)
	}
	off := e & QCOW2EntryOffsetMask
	if off%(uint64(1)<<h.ClusterBits) != 0 {
		return 0, invalidf(QCOW2, "L1 entry %d: L2 table offset %#x not cluster aligned", i, off)
	}
	return off, nil
}

// QCOW2RefTableEntry checks entry i of the refcount table: the offset of a
// refcount block (0: none), cluster aligned, no reserved bits.
func QCOW2RefTableEntry(h Header, i, e uint64) error {
	if e&QCOW2RefTableReserved != 0 || e%(uint64(1)<<h.ClusterBits) != 0 {
		return invalidf(QCOW2, "refcount table entry %d (%#x) is malformed", i, e)
	}
	return nil
}

// QCOW2Cluster is one L2 entry decoded: where the bytes of its guest
// cluster lie in the file.
type QCOW2Cluster struct {
	// Compressed: the cluster is deflated (or zstd) from Host, the
	// descriptor's first byte, to End, the end of its last 512-byte
	// sector.
	Compressed bool
	Host, End  uint64
	// Zero is a standard entry's bit 0: the cluster reads as zeros
	// (version 3; with extended L2 entries the bit is reserved).
	Zero bool
	// Allocated and ZeroSubclusters are an extended entry's bitmap: the
	// subclusters read from the file, and those that read as zeros.
	Allocated, ZeroSubclusters uint32
}

// QCOW2L2Entry decodes the L2 entry of guest cluster `cluster` (raw: its 8
// bytes, or 16 with extended L2 entries) and refuses what no reader may
// take: flags that contradict each other, reserved bits, a zero flag in a
// version 2 image, a data offset not cluster aligned, subclusters both
// allocated and zero or allocated in an unallocated cluster.
func QCOW2L2Entry(h Header, cluster uint64, raw []byte) (QCOW2Cluster, error) {
	e := binary.BigEndian.Uint64(raw)
	var bitmap uint64
	if h.ExtendedL2 {
		bitmap = binary.BigEndian.Uint64(raw[8:])
	}
	if e&QCOW2EntryCompressed != 0 {
		if e&QCOW2EntryCopied != 0 {
			return QCOW2Cluster{}, invalidf(QCOW2, "L2 entry for cluster %d: compressed cluster with the copied flag", cluster)
		}
		if bitmap != 0 {
			return QCOW2Cluster{}, invalidf(QCOW2, "L2 entry for cluster %d: compressed cluster with a subcluster bitmap", cluster)
		}
		// Host offset in bits 0..x-1 and the count of additional 512-byte
		// sectors in bits x..61, x = 62-(cluster_bits-8).
		x := 62 - (h.ClusterBits - 8)
		host := e & (uint64(1)<<x - 1)
		sectors := (e>>x)&(uint64(1)<<(h.ClusterBits-8)-1) + 1
		return QCOW2Cluster{Compressed: true, Host: host, End: host&^511 + sectors*512}, nil
	}
	if e&QCOW2L2Reserved != 0 {
		return QCOW2Cluster{}, invalidf(QCOW2, "L2 entry for cluster %d (%#x) has reserved bits set", cluster, e)
	}
	if e&QCOW2EntryZero != 0 && h.QCOW2Version < 3 {
		return QCOW2Cluster{}, invalidf(QCOW2, "L2 entry for cluster %d has the zero flag in a version 2 image", cluster)
	}
	c := QCOW2Cluster{Host: e & QCOW2EntryOffsetMask, Zero: e&QCOW2EntryZero != 0}
	if c.Host%(uint64(1)<<h.ClusterBits) != 0 {
		return QCOW2Cluster{}, invalidf(QCOW2, "L2 entry for cluster %d: data offset %#x not cluster aligned", cluster, c.Host)
	}
	if !h.ExtendedL2 {
		return c, nil
	}
	// One "allocated" bit (low half) and one "reads as zero" bit (high
	// half) for each of the 32 subclusters.
	c.Allocated, c.ZeroSubclusters = uint32(bitmap), uint32(bitmap>>32)
	if both := c.Allocated & c.ZeroSubclusters; both != 0 {
		return QCOW2Cluster{}, invalidf(QCOW2, "L2 entry for cluster %d: subclusters %#x are marked both allocated and zero", cluster, both)
	}
	if c.Host == 0 && c.Allocated != 0 {
		return QCOW2Cluster{}, invalidf(QCOW2, "L2 entry for cluster %d: subclusters %#x allocated in an unallocated cluster", cluster, c.Allocated)
	}
	return c, nil
}

// lastAllocated is the index of the last allocated subcluster: qemu
// writes only the allocated ones, so a cluster may end early in the file,
// but not before the end of that one. -1 when none is.
func (c QCOW2Cluster) lastAllocated() int {
	return 31 - bits.LeadingZeros32(c.Allocated)
}

// FileBytes is the range of the file the cluster's guest data is read
// from: a compressed cluster's sectors, a data cluster, or its allocated
// subclusters up to the last; n is 0 when nothing is read (unallocated,
// reads as zeros).
func (c QCOW2Cluster) FileBytes(h Header) (off, n uint64) {
	cs := uint64(1) << h.ClusterBits
	switch {
	case c.Compressed:
		return c.Host &^ 511, c.End - c.Host&^511
	case c.Host == 0:
		return 0, 0
	case h.ExtendedL2:
		if c.Allocated == 0 {
			return 0, 0
		}
		return c.Host, uint64(c.lastAllocated()+1) * (cs / qcow2Subclusters)
	case c.Zero:
		return 0, 0
	}
	return c.Host, cs
}

// qcow2L2Ref is one L2 table an L1 table names.
type qcow2L2Ref struct {
	off uint64
	idx uint32 // its L1 index
}

// qcow2Walker reads a qcow2's L1 table and its L2 tables from a complete
// file of size bytes, each entry decoded and checked against the file's
// end: the walk the structural check and the layout share.
type qcow2Walker struct {
	r           io.ReaderAt
	size        uint64
	h           Header
	clusterSize uint64
}

func newQCOW2Walker(r io.ReaderAt, h Header, size int64) *qcow2Walker {
	return &qcow2Walker{r: r, size: uint64(size), h: h, clusterSize: uint64(1) << h.ClusterBits}
}

// inside fails unless [off, off+n) lies inside the file.
func (w *qcow2Walker) inside(what string, off, n uint64) error {
	if off > w.size || n > w.size-off {
		return invalidf(QCOW2, "%s at offset %#x..%#x lies past the end of the %d-byte file (truncated image?)", what, off, off+n, w.size)
	}
	return nil
}

// forEntries streams a table of n big-endian 64-bit entries at off, one
// chunk of qcow2ChunkBytes at a time.
func (w *qcow2Walker) forEntries(off, n uint64, fn func(i, e uint64) error) error {
	buf := make([]byte, min(n*8, qcow2ChunkBytes))
	for i := uint64(0); i < n; {
		k := min(n-i, uint64(len(buf))/8)
		chunk := buf[:k*8]
		if err := readFullAt(w.r, chunk, int64(off+i*8)); err != nil {
			return err
		}
		for j := uint64(0); j < k; j++ {
			if err := fn(i+j, binary.BigEndian.Uint64(chunk[j*8:])); err != nil {
				return err
			}
		}
		i += k
	}
	return nil
}

// l2Tables reads the L1 table and returns the L2 tables it names, sorted
// by offset. They must be distinct: a hostile L1 pointing every entry at
// one L2 table would otherwise make us read it millions of times.
// Distinct tables inside the file bound the work by the file size; the
// list is bounded by qemu's own L1 limit.
func (w *qcow2Walker) l2Tables() ([]qcow2L2Ref, error) {
	h := w.h
	if err := w.inside("L1 table", h.L1TableOffset, uint64(h.L1Size)*8); err != nil {
		return nil, err
	}
	var refs []qcow2L2Ref
	err := w.forEntries(h.L1TableOffset, uint64(h.L1Size), func(i, e uint64) error {
		off, err := QCOW2L1Entry(h, i, e)
		if err != nil || off == 0 {
			return err
		}
		if err := w.inside(fmt.Sprintf("L2 table %d", i), off, w.clusterSize); err != nil {
			return err
		}
		refs = append(refs, qcow2L2Ref{off: off, idx: uint32(i)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Sorted by offset: duplicates are adjacent and the reads sequential.
	slices.SortFunc(refs, func(a, b qcow2L2Ref) int { return cmp.Compare(a.off, b.off) })
	for k := 1; k < len(refs); k++ {
		if refs[k].off == refs[k-1].off {
			return nil, invalidf(QCOW2, "L1 entries %d and %d share the L2 table at %#x", refs[k-1].idx, refs[k].idx, refs[k].off)
		}
	}
	return refs, nil
}

// clusters reads the tables of refs, qcow2TablesInFlight at a time, and
// calls fn, in the order of refs, for every entry inside the virtual size
// with the table it is in. Each entry is decoded by QCOW2L2Entry and its
// bytes checked to lie inside the file first.
func (w *qcow2Walker) clusters(ctx context.Context, refs []qcow2L2Ref, fn func(ref qcow2L2Ref, cluster uint64, c QCOW2Cluster) error) error {
	h := w.h
	entrySize := uint64(8)
	if h.ExtendedL2 {
		entrySize = 16
	}
	l2Entries := qcow2L2Entries(h.ClusterBits, h.ExtendedL2)
	virtualClusters := (uint64(h.VirtualSize) + w.clusterSize - 1) >> h.ClusterBits
	bufs := make([][]byte, min(qcow2TablesInFlight, len(refs)))
	for i := range bufs {
		bufs[i] = make([]byte, w.clusterSize)
	}
	errs := make([]error, len(bufs))
	for start := 0; start < len(refs); start += len(bufs) {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch := refs[start:min(start+len(bufs), len(refs))]
		var wg sync.WaitGroup
		for k, ref := range batch {
			wg.Go(func() { errs[k] = readFullAt(w.r, bufs[k], int64(ref.off)) })
		}
		wg.Wait()
		for k, ref := range batch {
			if errs[k] != nil {
				return errs[k]
			}
			first := uint64(ref.idx) * l2Entries
			n := min(l2Entries, virtualClusters-min(first, virtualClusters))
			for j := uint64(0); j < n; j++ {
				cluster := first + j
				c, err := QCOW2L2Entry(h, cluster, bufs[k][j*entrySize:])
				if err == nil {
					err = w.checkInside(cluster, c)
				}
				if err == nil {
					err = fn(ref, cluster, c)
				}
				if err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkInside fails unless the bytes cluster c reads lie inside the file.
func (w *qcow2Walker) checkInside(cluster uint64, c QCOW2Cluster) error {
	switch {
	case c.Compressed:
		// qemu rounds the compressed length up to whole sectors, so the
		// last compressed cluster may legitimately end up to 511 bytes
		// past the end of the file; its first byte and its rounded-down
		// end must still be inside.
		if c.Host >= w.size || c.End > (w.size+511)&^511 {
			return invalidf(QCOW2, "compressed cluster %d at offset %#x..%#x lies past the end of the %d-byte file (truncated image?)", cluster, c.Host, c.End, w.size)
		}
		return nil
	case c.Host == 0:
		return nil
	case w.h.ExtendedL2:
		if c.Allocated == 0 {
			return nil // nothing of this cluster is read from the file
		}
		last := c.lastAllocated()
		return w.inside(fmt.Sprintf("data cluster %d (up to its allocated subcluster %d)", cluster, last), c.Host, uint64(last+1)*(w.clusterSize/qcow2Subclusters))
	}
	return w.inside(fmt.Sprintf("data cluster %d", cluster), c.Host, w.clusterSize)
}
