package importer

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/diskimport/engine/errdefs"
)

// checkVDI refuses a VDI whose allocated blocks lie past the end of the
// image: qemu-img reads a truncated VDI's missing blocks as zeros, and both
// `qemu-img check` and `convert` exit 0. The block map is streamed, so
// memory stays small whatever it claims.
func checkVDI(f io.ReaderAt, size int64) error {
	head := make([]byte, 0x200)
	if _, err := f.ReadAt(head, 0); err != nil {
		return fmt.Errorf("vdi: reading header: %v: %w", err, errdefs.ErrInvalidImage)
	}
	le := binary.LittleEndian
	offBlocks := int64(le.Uint32(head[0x154:]))
	offData := int64(le.Uint32(head[0x158:]))
	blockSize := int64(le.Uint32(head[0x178:]))
	blocks := int64(le.Uint32(head[0x180:]))
	if offBlocks+4*blocks > size {
		return fmt.Errorf("vdi: block map of %d entries at offset %d lies past the end of the %d-byte file (truncated image?): %w",
			blocks, offBlocks, size, errdefs.ErrInvalidImage)
	}
	r := bufio.NewReaderSize(io.NewSectionReader(f, offBlocks, 4*blocks), 64<<10)
	var e [4]byte
	for i := int64(0); i < blocks; i++ {
		if _, err := io.ReadFull(r, e[:]); err != nil {
			return fmt.Errorf("vdi: reading block map entry %d: %v: %w", i, err, errdefs.ErrInvalidImage)
		}
		v := le.Uint32(e[:])
		if v >= 0xfffffffe { // unallocated or zero block
			continue
		}
		if end := offData + (int64(v)+1)*blockSize; end > size {
			return fmt.Errorf("vdi: block %d is stored at bytes %d..%d, past the end of the %d-byte file (truncated image?): %w",
				i, end-blockSize, end, size, errdefs.ErrInvalidImage)
		}
	}
	return nil
}
