package format

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/diskimport/engine/errdefs"
)

// vdiUnallocated and above mark block map entries with no data in the file
// (unallocated, or a block that reads as zeros).
const vdiUnallocated = 0xfffffffe

// CheckVDI refuses a VDI of size bytes whose block map or allocated blocks
// lie past the end of the file: qemu-img reads a truncated VDI's missing
// blocks as zeros, and both `qemu-img check` and `convert` exit 0. The
// block map is streamed, so memory stays small whatever it claims.
func CheckVDI(r io.ReaderAt, size int64) error {
	head := make([]byte, vdiHeaderEnd)
	if err := readHeadAt(VDI, r, head, size); err != nil {
		return err
	}
	h, err := parseVDIHeader(head)
	if err != nil {
		return err
	}
	offBlocks, offData := int64(h.VDIBlockMapOffset), int64(h.VDIDataOffset)
	blockSize, blocks := int64(h.VDIBlockSize), int64(h.VDIBlocks)
	if offBlocks+4*blocks > size {
		return invalidf(VDI, "block map of %d entries at offset %d lies past the end of the %d-byte file (truncated image?)", blocks, offBlocks, size)
	}
	br := bufio.NewReaderSize(io.NewSectionReader(r, offBlocks, 4*blocks), 64<<10)
	var e [4]byte
	for i := int64(0); i < blocks; i++ {
		if _, err := io.ReadFull(br, e[:]); err != nil {
			return fmt.Errorf("vdi: reading block map entry %d: %w", i, readFailure(err))
		}
		v := binary.LittleEndian.Uint32(e[:])
		if v >= vdiUnallocated {
			continue
		}
		if end := offData + (int64(v)+1)*blockSize; end > size {
			return invalidf(VDI, "block %d is stored at bytes %d..%d, past the end of the %d-byte file (truncated image?)", i, end-blockSize, end, size)
		}
	}
	return nil
}

// readHeadAt reads the first len(p) bytes of an image of size bytes; a
// file shorter than that is a truncated image.
func readHeadAt(f Format, r io.ReaderAt, p []byte, size int64) error {
	if size < int64(len(p)) {
		return invalidf(f, "file of %d bytes is shorter than its %d-byte header (truncated image?)", size, len(p))
	}
	if _, err := r.ReadAt(p, 0); err != nil && err != io.EOF {
		return fmt.Errorf("%s: reading the header: %w", f, readFailure(err))
	}
	return nil
}

// readFailure keeps a read error's cause (a broken connection under a
// ranged read stays that) and calls a short read a truncated image.
func readFailure(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("short read: %w", errdefs.ErrInvalidImage)
	}
	return err
}
