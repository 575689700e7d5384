package format

import (
	"context"
	"fmt"
	"io"

	"github.com/diskimport/engine/errdefs"
)

// QCOW2Layout is what a qcow2's L1 and L2 tables say about where its bytes
// lie in the file: what the route choice weighs between reading the image
// over ranges and decoding it as a stream.
type QCOW2Layout struct {
	// Referenced is the bytes of the file the image uses: its first
	// cluster, the L1 and L2 tables and every data cluster (a compressed
	// one by its sectors). The refcount structures are left out: small,
	// and neither route needs all of them.
	Referenced int64
	// Early is the data and table bytes that lie in the file before the
	// table that maps them: what a one-pass decoder must hold in memory
	// until that table passes.
	Early int64
	// Clusters counts the data clusters in the file, Compressed ones
	// among them.
	Clusters, Compressed int64
	L2Tables             int
}

// ReadQCOW2Layout reads the L1 table and every L2 table of the qcow2 with
// header h in r (size bytes), through the structural check's walk: an
// entry or table that check refuses is its errdefs.ErrInvalidImage here.
// Tables of more than maxTableBytes (the L1, or the L2 tables together)
// are not read: errdefs.ErrTablesTooLarge. The refcount structures are
// not checked; CheckQCOW2 does that later, on either route.
func ReadQCOW2Layout(ctx context.Context, r io.ReaderAt, h Header, size, maxTableBytes int64) (QCOW2Layout, error) {
	cs := uint64(1) << h.ClusterBits
	l1Len := uint64(h.L1Size) * 8
	if l1Len > uint64(maxTableBytes) {
		return QCOW2Layout{}, fmt.Errorf("qcow2: L1 table of %d bytes: %w", l1Len, errdefs.ErrTablesTooLarge)
	}
	lay := QCOW2Layout{Referenced: int64(cs + l1Len)}
	if l1Len == 0 {
		return lay, nil
	}
	w := newQCOW2Walker(r, h, size)
	refs, err := w.l2Tables()
	if err != nil {
		return lay, err
	}
	if uint64(len(refs))*cs > uint64(maxTableBytes) {
		return lay, fmt.Errorf("qcow2: %d L2 tables of %d bytes: %w", len(refs), cs, errdefs.ErrTablesTooLarge)
	}
	l1End := h.L1TableOffset + l1Len
	for _, ref := range refs {
		if ref.off < l1End {
			lay.Early += int64(cs)
		}
	}
	lay.L2Tables = len(refs)
	lay.Referenced += int64(uint64(len(refs)) * cs)
	err = w.clusters(ctx, refs, func(ref qcow2L2Ref, _ uint64, c QCOW2Cluster) error {
		host, n := c.FileBytes(h)
		if n == 0 {
			return nil
		}
		lay.Referenced += int64(n)
		lay.Clusters++
		if c.Compressed {
			lay.Compressed++
		}
		// A cluster can be mapped once both its L2 table and the L1 have
		// passed.
		if host < max(ref.off+cs, l1End) {
			lay.Early += int64(n)
		}
		return nil
	})
	return lay, err
}
