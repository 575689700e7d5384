package engine

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"sync"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/format"
)

// qcow2Layout is what a qcow2's L1 and L2 tables say about where its bytes
// lie in the file, read over ranges before the route is chosen
// (routechoice.go).
type qcow2Layout struct {
	// referenced is the bytes of the file the image uses: its first
	// cluster, the L1 and L2 tables and every data cluster (a compressed
	// one by its sectors). The refcount structures are left out: small,
	// and neither route needs all of them.
	referenced int64
	// early is the data and table bytes that lie in the file before the
	// table that maps them: what a one-pass decoder must hold in memory
	// until that table passes.
	early int64
	// clusters counts the data clusters in the file, compressed ones
	// among them.
	clusters, compressed int64
	l2Tables             int
}

// Bounds on the probe: past them the layout is not read and the route is
// chosen without it. maxLayoutTables covers 1 TiB of a fully allocated
// disk at 64 KiB clusters (16 MiB of L2 tables).
const (
	maxLayoutTableBytes = 16 << 20
	layoutReaders       = 4 // range reads in flight
)

var errLayoutTooBig = errors.New("qcow2 tables too large to read before choosing a route")

// readQCOW2Layout reads the L1 table and every L2 table of the qcow2 in r
// (size bytes). A table outside the file is an errdefs.ErrInvalidImage;
// the structural check (format.CheckQCOW2) gives the verdict on
// everything else later, on either route.
func readQCOW2Layout(ctx context.Context, r io.ReaderAt, h format.Header, size int64) (qcow2Layout, error) {
	cs := uint64(1) << h.ClusterBits
	l1Len := uint64(h.L1Size) * 8
	if l1Len > maxLayoutTableBytes {
		return qcow2Layout{}, errLayoutTooBig
	}
	l1End := h.L1TableOffset + l1Len
	lay := qcow2Layout{referenced: int64(cs + l1Len)}
	if l1Len == 0 {
		return lay, nil
	}
	if l1End > uint64(size) {
		return lay, fmt.Errorf("qcow2: L1 table at %#x..%#x lies past the end of the %d-byte file: %w", h.L1TableOffset, l1End, size, errdefs.ErrInvalidImage)
	}
	l1 := make([]byte, l1Len)
	if err := readFull(r, l1, int64(h.L1TableOffset)); err != nil {
		return lay, err
	}
	var l2s []uint64
	for i := range h.L1Size {
		if off := binary.BigEndian.Uint64(l1[8*i:]) & format.QCOW2EntryOffsetMask; off != 0 {
			l2s = append(l2s, off)
		}
	}
	slices.Sort(l2s)
	l2s = slices.Compact(l2s) // a shared table is the checker's to refuse
	if uint64(len(l2s))*cs > maxLayoutTableBytes {
		return lay, errLayoutTooBig
	}
	for _, off := range l2s {
		if off+cs > uint64(size) {
			return lay, fmt.Errorf("qcow2: L2 table at %#x lies past the end of the %d-byte file: %w", off, size, errdefs.ErrInvalidImage)
		}
		if off < l1End {
			lay.early += int64(cs)
		}
	}
	lay.l2Tables = len(l2s)
	lay.referenced += int64(uint64(len(l2s)) * cs)

	tables, err := readTables(ctx, r, l2s, cs)
	if err != nil {
		return lay, err
	}
	entrySize := uint64(8)
	if h.ExtendedL2 {
		entrySize = 16
	}
	x := 62 - (h.ClusterBits - 8) // compressed descriptor: offset bits
	for k, t := range tables {
		// A cluster can be mapped once both its L2 table and the L1 have
		// passed.
		mappedAt := max(l2s[k]+cs, l1End)
		for j := uint64(0); j+entrySize <= cs; j += entrySize {
			e := binary.BigEndian.Uint64(t[j:])
			var host, n, limit uint64
			switch {
			case e&format.QCOW2EntryCompressed != 0:
				host = e & (uint64(1)<<x - 1)
				n = ((e>>x)&(uint64(1)<<(h.ClusterBits-8)-1) + 1) * 512
				// qemu rounds the last compressed cluster up to a sector.
				limit = uint64(size+511) &^ 511
				host &^= 511
				lay.compressed++
			case e&format.QCOW2EntryOffsetMask == 0:
				continue // unallocated
			case h.ExtendedL2:
				// Only the allocated subclusters are in the file.
				alloc := uint32(binary.BigEndian.Uint64(t[j+8:]))
				if alloc == 0 {
					continue
				}
				host, n = e&format.QCOW2EntryOffsetMask, uint64(32-bits.LeadingZeros32(alloc))*(cs/32)
			case e&format.QCOW2EntryZero != 0:
				continue // reads as zeros, not read
			default:
				host, n = e&format.QCOW2EntryOffsetMask, cs
			}
			if limit == 0 {
				limit = uint64(size)
			}
			if host+n > limit {
				// Truncated: the structural check on the ranged route
				// says exactly what is missing.
				return lay, fmt.Errorf("qcow2: data at %#x..%#x lies past the end of the %d-byte file: %w", host, host+n, size, errdefs.ErrInvalidImage)
			}
			lay.referenced += int64(n)
			lay.clusters++
			if host < mappedAt {
				lay.early += int64(n)
			}
		}
	}
	return lay, nil
}

// readTables reads the tables at offs (cs bytes each, sorted), a few range
// requests at a time: over a network each costs a round trip.
func readTables(ctx context.Context, r io.ReaderAt, offs []uint64, cs uint64) ([][]byte, error) {
	out := make([][]byte, len(offs))
	next := make(chan int)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range min(layoutReaders, len(offs)) {
		wg.Go(func() {
			for k := range next {
				b := make([]byte, cs)
				if err := readFull(r, b, int64(offs[k])); err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
					continue
				}
				out[k] = b
			}
		})
	}
	for k := range offs {
		if ctx.Err() != nil {
			break
		}
		next <- k
	}
	close(next)
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// readFull reads len(p) bytes at off; a short read is a truncated file.
func readFull(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("qcow2: table at %#x: %d of %d bytes before the end of the file: %w", off, n, len(p), errdefs.ErrInvalidImage)
	}
	return err
}
