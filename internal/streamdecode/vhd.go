package streamdecode

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
)

// Dynamic VHD layout (Microsoft "Virtual Hard Disk Image Format
// Specification", big endian): a copy of the footer at 0, the dynamic
// header ("cxsparse") at 512, the block allocation table (BAT) where the
// header says, one sector number per block (0xFFFFFFFF: not allocated),
// and each allocated block stored as its sector bitmap, then its data.
const (
	vhdHeadLen     = 512 + 1024
	vhdUnallocated = 0xffffffff
	vhdDynamic     = 3
)

// DecodeVHD reads a dynamic VHD from r, from its first byte on, and
// writes the guest disk to sink. The disk is sized as qemu's vpc driver
// sizes it (CHS geometry or current_size, by creator: format.ParseHeader).
// The sector bitmaps are skipped: qemu reads an allocated block whole,
// whatever its bitmap says, so the decoder does too. A block stored over
// the header, the BAT or another block, or past the end of the stream, is
// errdefs.ErrInvalidImage (format.CheckVHD's checks); a BAT that comes
// after more than o.MaxBuffered bytes of blocks is errdefs.ErrNotStreamable.
// The sink may have received writes when an error is returned.
func DecodeVHD(ctx context.Context, r io.Reader, sink Sink, o Options) (Stats, error) {
	o = o.withDefaults()
	head, h, err := readHeader(r, format.VHD, vhdHeadLen, o.MaxVirtualSize)
	if err != nil {
		return Stats{}, err
	}
	if h.Format != format.VHD || h.VHDDiskType != vhdDynamic {
		return Stats{}, fmt.Errorf("vhd: not a dynamic VHD: %w", errdefs.ErrNotStreamable)
	}
	be := binary.BigEndian
	dyn := head[512:]
	tableOff := be.Uint64(dyn[16:])
	entries := uint64(be.Uint32(dyn[28:]))
	blockSize := uint64(be.Uint32(dyn[32:]))
	if tableOff > 1<<53 {
		return Stats{}, fmt.Errorf("vhd: block allocation table at offset %#x: %w", tableOff, errdefs.ErrInvalidImage)
	}
	layout := blockLayout{
		vsize:     uint64(h.VirtualSize),
		blockSize: blockSize,
		// One bit per sector, padded to whole sectors.
		prefix: (blockSize/512/8 + 511) &^ 511,
	}
	m := blockMap{
		name:      "vhd",
		vsize:     layout.vsize,
		blockSize: layout.blockSize,
		prefix:    layout.prefix,
		headEnd:   vhdHeadLen,
		tables:    []span{{tableOff, tableOff + 4*entries, "block allocation table"}},
		// qemu reads the BAT in whole sectors and refuses a file that
		// ends inside the last one.
		need:      (tableOff + 4*entries + 511) &^ 511,
		maxBlocks: entries,
		parse: func(t [][]byte, blocks []blockExtent) (blockLayout, error) {
			layout.blocks = blocks
			for i := range entries {
				if e := be.Uint32(t[0][4*i:]); e != vhdUnallocated {
					layout.blocks = append(layout.blocks, blockExtent{start: uint64(e) * 512, index: i})
				}
			}
			return layout, nil
		},
	}
	return decodeBlockMap(ctx, r, m, sink, o)
}
