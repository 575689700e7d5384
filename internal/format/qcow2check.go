package format

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/diskimport/engine/errdefs"
)

// qcow2ChunkBytes: L1 and refcount tables are read in chunks of this size.
const qcow2ChunkBytes = 64 << 10

// CheckQCOW2 checks the structure of a complete qcow2 file of size bytes:
// the L1 table, every L2 table, every data cluster (compressed ranges too)
// and the refcount table and blocks must lie inside the file, and the table
// entries must be well formed. qemu-img reads clusters past the end of a
// truncated file as zeros and succeeds, so this is what catches a qcow2 that
// was cut off in the middle. Memory stays bounded: tables are read one chunk
// or a few L2 tables at a time.
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
	w := newQCOW2Walker(r, h, size)
	if err := checkQCOW2Refcounts(w); err != nil {
		return err
	}
	refs, err := w.l2Tables()
	if err != nil {
		return err
	}
	return w.clusters(context.Background(), refs, func(qcow2L2Ref, uint64, QCOW2Cluster) error { return nil })
}

// checkQCOW2Refcounts checks the refcount table and that every refcount
// block it names lies inside the file.
func checkQCOW2Refcounts(w *qcow2Walker) error {
	n := uint64(w.h.RefcountClusters) * w.clusterSize
	if err := w.inside("refcount table", w.h.RefcountOffset, n); err != nil {
		return err
	}
	return w.forEntries(w.h.RefcountOffset, n/8, func(i, e uint64) error {
		if e == 0 {
			return nil
		}
		if err := QCOW2RefTableEntry(w.h, i, e); err != nil {
			return err
		}
		return w.inside(fmt.Sprintf("refcount block %d", i), e, w.clusterSize)
	})
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
