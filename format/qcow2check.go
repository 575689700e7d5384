package format

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"

	"github.com/diskimport/engine/errdefs"
)

// qcow2 table reading (qcow2 specification).
const (
	qcow2ChunkBytes = 64 << 10 // L1 and refcount tables are read in chunks

	qcow2Subclusters = 32 // per cluster, with extended L2 entries
)

// CheckQCOW2 checks the structure of a complete qcow2 file of size bytes:
// the L1 table, every L2 table, every data cluster (compressed ranges too)
// and the refcount table and blocks must lie inside the file, and the table
// entries must be well formed. qemu-img reads clusters past the end of a
// truncated file as zeros and succeeds, so this is what catches a qcow2 that
// was cut off in the middle. Memory stays bounded: tables are read one chunk
// or one L2 table at a time.
func CheckQCOW2(r io.ReaderAt, size int64) error {
	if size < qcow2V2HeaderLen {
		return invalidf(QCOW2, "file of %d bytes is shorter than a header", size)
	}
	head := make([]byte, min(size, DefaultPeekSize))
	if err := readFullAt(r, head, 0); err != nil {
		return err
	}
	h, err := parseQCOW2Header(head)
	if err != nil {
		return err
	}
	c := qcow2Checker{r: r, size: uint64(size), h: h, clusterSize: uint64(1) << h.ClusterBits}
	if err := c.checkRefcounts(); err != nil {
		return err
	}
	return c.checkL1()
}

type qcow2Checker struct {
	r           io.ReaderAt
	size        uint64
	h           Header
	clusterSize uint64
}

// inside fails unless [off, off+n) lies inside the file.
func (c *qcow2Checker) inside(what string, off, n uint64) error {
	if off > c.size || n > c.size-off {
		return invalidf(QCOW2, "%s at offset %#x..%#x lies past the end of the %d-byte file (truncated image?)", what, off, off+n, c.size)
	}
	return nil
}

// forEntries streams a table of n big-endian 64-bit entries at off.
func (c *qcow2Checker) forEntries(off, n uint64, fn func(i, e uint64) error) error {
	buf := make([]byte, min(n*8, qcow2ChunkBytes))
	for i := uint64(0); i < n; {
		k := min(n-i, uint64(len(buf))/8)
		chunk := buf[:k*8]
		if err := readFullAt(c.r, chunk, int64(off+i*8)); err != nil {
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

func (c *qcow2Checker) checkRefcounts() error {
	n := uint64(c.h.RefcountClusters) * c.clusterSize
	if err := c.inside("refcount table", c.h.RefcountOffset, n); err != nil {
		return err
	}
	return c.forEntries(c.h.RefcountOffset, n/8, func(i, e uint64) error {
		if e == 0 {
			return nil
		}
		if e&QCOW2RefTableReserved != 0 || e%c.clusterSize != 0 {
			return invalidf(QCOW2, "refcount table entry %d (%#x) is malformed", i, e)
		}
		return c.inside(fmt.Sprintf("refcount block %d", i), e, c.clusterSize)
	})
}

func (c *qcow2Checker) checkL1() error {
	h := c.h
	if err := c.inside("L1 table", h.L1TableOffset, uint64(h.L1Size)*8); err != nil {
		return err
	}
	// Collect the L2 tables first. They must be distinct: a hostile L1
	// pointing every entry at one L2 table would otherwise make us read it
	// millions of times. Distinct tables inside the file bound the work by
	// the file size; the list is bounded by qemu's own L1 limit.
	type l2ref struct {
		off uint64
		idx uint32
	}
	var refs []l2ref
	err := c.forEntries(h.L1TableOffset, uint64(h.L1Size), func(i, e uint64) error {
		if e&QCOW2L1Reserved != 0 {
			return invalidf(QCOW2, "L1 entry %d (%#x) has reserved bits set", i, e)
		}
		off := e & QCOW2EntryOffsetMask
		if off == 0 {
			return nil
		}
		if off%c.clusterSize != 0 {
			return invalidf(QCOW2, "L1 entry %d: L2 table offset %#x not cluster aligned", i, off)
		}
		if err := c.inside(fmt.Sprintf("L2 table %d", i), off, c.clusterSize); err != nil {
			return err
		}
		refs = append(refs, l2ref{off: off, idx: uint32(i)})
		return nil
	})
	if err != nil {
		return err
	}
	// Sorted by offset: duplicates are adjacent and the reads sequential.
	slices.SortFunc(refs, func(a, b l2ref) int { return cmp.Compare(a.off, b.off) })
	for k := 1; k < len(refs); k++ {
		if refs[k].off == refs[k-1].off {
			return invalidf(QCOW2, "L1 entries %d and %d share the L2 table at %#x", refs[k-1].idx, refs[k].idx, refs[k].off)
		}
	}

	entrySize := uint64(8)
	if h.ExtendedL2 {
		entrySize = 16
	}
	l2Entries := qcow2L2Entries(h.ClusterBits, h.ExtendedL2)
	virtualClusters := (uint64(h.VirtualSize) + c.clusterSize - 1) >> h.ClusterBits
	l2 := make([]byte, c.clusterSize)
	for _, ref := range refs {
		if err := readFullAt(c.r, l2, int64(ref.off)); err != nil {
			return err
		}
		first := uint64(ref.idx) * l2Entries
		n := min(l2Entries, virtualClusters-min(first, virtualClusters))
		for j := uint64(0); j < n; j++ {
			ent := l2[j*entrySize:]
			if err := c.checkL2Entry(first+j, binary.BigEndian.Uint64(ent), ent); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *qcow2Checker) checkL2Entry(cluster, e uint64, raw []byte) error {
	h := c.h
	if e&QCOW2EntryCompressed != 0 {
		if e&QCOW2EntryCopied != 0 {
			return invalidf(QCOW2, "L2 entry for cluster %d: compressed cluster with the copied flag", cluster)
		}
		if h.ExtendedL2 && binary.BigEndian.Uint64(raw[8:]) != 0 {
			return invalidf(QCOW2, "L2 entry for cluster %d: compressed cluster with a subcluster bitmap", cluster)
		}
		// Compressed descriptor: host offset in bits 0..x-1 and the count
		// of additional 512-byte sectors in bits x..61, x = 62-(cb-8).
		x := 62 - (h.ClusterBits - 8)
		hostOff := e & (uint64(1)<<x - 1)
		sectors := (e>>x)&(uint64(1)<<(h.ClusterBits-8)-1) + 1
		end := hostOff&^511 + sectors*512
		// qemu rounds the compressed length up to whole sectors, so the
		// last compressed cluster may legitimately end up to 511 bytes past
		// the end of the file; its first byte and its rounded-down end must
		// still be inside.
		if hostOff >= c.size || end > (c.size+511)&^511 {
			return invalidf(QCOW2, "compressed cluster %d at offset %#x..%#x lies past the end of the %d-byte file (truncated image?)", cluster, hostOff, end, c.size)
		}
		return nil
	}
	if e&QCOW2L2Reserved != 0 {
		return invalidf(QCOW2, "L2 entry for cluster %d (%#x) has reserved bits set", cluster, e)
	}
	if e&QCOW2EntryZero != 0 && h.QCOW2Version < 3 {
		return invalidf(QCOW2, "L2 entry for cluster %d has the zero flag in a version 2 image", cluster)
	}
	off := e & QCOW2EntryOffsetMask
	if off%c.clusterSize != 0 {
		return invalidf(QCOW2, "L2 entry for cluster %d: data offset %#x not cluster aligned", cluster, off)
	}
	if h.ExtendedL2 {
		return c.checkSubclusters(cluster, off, binary.BigEndian.Uint64(raw[8:]))
	}
	if off == 0 {
		return nil
	}
	return c.inside(fmt.Sprintf("data cluster %d", cluster), off, c.clusterSize)
}

// checkSubclusters checks the data of a cluster with extended L2 entries.
// Its 64-bit bitmap holds one "allocated" bit (low half) and one "reads as
// zero" bit (high half) for each of the 32 subclusters; qemu writes only
// the allocated ones, so a cluster may legitimately end early in the file,
// but not before the end of its last allocated subcluster.
func (c *qcow2Checker) checkSubclusters(cluster, off, bitmap uint64) error {
	allocated := uint32(bitmap)
	zero := uint32(bitmap >> 32)
	if both := allocated & zero; both != 0 {
		return invalidf(QCOW2, "L2 entry for cluster %d: subclusters %#x are marked both allocated and zero", cluster, both)
	}
	if off == 0 {
		if allocated != 0 {
			return invalidf(QCOW2, "L2 entry for cluster %d: subclusters %#x allocated in an unallocated cluster", cluster, allocated)
		}
		return nil
	}
	if allocated == 0 {
		return nil // nothing of this cluster is read from the file
	}
	last := uint64(31 - bits.LeadingZeros32(allocated))
	return c.inside(fmt.Sprintf("data cluster %d (up to its allocated subcluster %d)", cluster, last), off, (last+1)*(c.clusterSize/qcow2Subclusters))
}

// readFullAt reads len(p) bytes at off; a short read is a truncated image.
func readFullAt(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("qcow2: short read of %d bytes at offset %#x (got %d): %w", len(p), off, n, errdefs.ErrInvalidImage)
	}
	return fmt.Errorf("qcow2: read at offset %#x: %w", off, err)
}
