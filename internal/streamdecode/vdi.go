package streamdecode

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/iostage"
)

// VDI layout (VirtualBox, little endian): a 512-byte header, the block map
// at offset_bmap, one entry per 1 MiB block (0xFFFFFFFF not allocated,
// 0xFFFFFFFE a zero block: both read as zeros), naming the block's slot
// in the data area at offset_data; slots are filled in allocation order.
const (
	vdiHeadLen   = 512
	vdiDiscarded = 0xfffffffe
)

// DecodeVDI reads a VDI (dynamic or static) from r, from its first byte
// on, and writes the guest disk to sink. A block stored over the header,
// the block map or another block, or past the end of the stream, is
// errdefs.ErrInvalidImage (format.CheckVDI's checks); a header naming a
// link or parent image, which qemu refuses to open, is
// errdefs.ErrUnsafeImage. The sink may have received writes when an error
// is returned.
func DecodeVDI(ctx context.Context, r io.Reader, sink Sink, o Options) (Stats, error) {
	o = o.withDefaults()
	head, h, err := readHeader(r, format.VDI, vdiHeadLen, o.MaxVirtualSize)
	if err != nil {
		return Stats{}, err
	}
	if h.Format != format.VDI {
		return Stats{}, fmt.Errorf("vdi: not a VDI image: %w", errdefs.ErrInvalidImage)
	}
	// A differencing image's parent is named by these UUIDs; qemu refuses
	// any image that sets them, whatever its type.
	for _, u := range []struct {
		what string
		off  int
	}{{"link", 0x1a8}, {"parent", 0x1b8}} {
		if !iostage.IsZero(head[u.off : u.off+16]) {
			return Stats{}, fmt.Errorf("vdi: the header names a %s image (UUID at %#x): %w", u.what, u.off, errdefs.ErrUnsafeImage)
		}
	}
	offData := uint64(h.VDIDataOffset)
	blockSize := uint64(h.VDIBlockSize)
	// block_extra (0x17c) is not used: qemu places block k at
	// offset_data + k*block_size whatever it says.
	layout := blockLayout{vsize: uint64(h.VirtualSize), blockSize: blockSize}
	mapOff := uint64(h.VDIBlockMapOffset)
	entries := uint64(h.VDIBlocks)
	m := blockMap{
		name:      "vdi",
		vsize:     layout.vsize,
		blockSize: layout.blockSize,
		headEnd:   vdiHeadLen,
		tables:    []span{{mapOff, mapOff + 4*entries, "block map"}},
		need:      mapOff + 4*entries,
		maxBlocks: entries,
		parse: func(t [][]byte, blocks []blockExtent) (blockLayout, error) {
			layout.blocks = blocks
			for i := range entries {
				if e := binary.LittleEndian.Uint32(t[0][4*i:]); e < vdiDiscarded {
					layout.blocks = append(layout.blocks, blockExtent{start: offData + uint64(e)*blockSize, index: i})
				}
			}
			return layout, nil
		},
	}
	return decodeBlockMap(ctx, r, m, sink, o)
}
