package format

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// vhdUnallocated marks a block allocation table entry with no block.
const vhdUnallocated = 0xffffffff

// CheckVHD refuses a dynamic VHD of size bytes whose block allocation table
// or any allocated block (its sector bitmap and data) lies past the end of
// the file. qemu's own check rounds the file up to whole sectors, so a VHD
// cut up to 511 bytes into its last block converts "successfully" with
// zeros where the data was. The table is streamed: memory stays small
// whatever it claims.
func CheckVHD(r io.ReaderAt, size int64) error {
	head := make([]byte, vhdFooterLen+vhdDynHeaderLen)
	if err := readHeadAt(VHD, r, head, size); err != nil {
		return err
	}
	if _, err := parseVHDHeader(head); err != nil {
		return err
	}
	be := binary.BigEndian
	dyn := head[vhdFooterLen:]
	tableOff := be.Uint64(dyn[16:])
	entries := uint64(be.Uint32(dyn[28:]))
	blockSize := uint64(be.Uint32(dyn[32:]))
	// One bitmap bit per 512-byte sector, padded to whole sectors.
	bitmapSize := (blockSize/512/8 + 511) &^ 511
	usize := uint64(size)
	if tableOff > usize || entries*4 > usize-tableOff {
		return invalidf(VHD, "block allocation table of %d entries at offset %d lies past the end of the %d-byte file (truncated image?)", entries, tableOff, size)
	}
	br := bufio.NewReaderSize(io.NewSectionReader(r, int64(tableOff), int64(entries*4)), 64<<10)
	var e [4]byte
	for i := uint64(0); i < entries; i++ {
		if _, err := io.ReadFull(br, e[:]); err != nil {
			return fmt.Errorf("vhd: reading block allocation table entry %d: %w", i, readFailure(err))
		}
		sector := be.Uint32(e[:])
		if sector == vhdUnallocated {
			continue
		}
		start := uint64(sector) * 512
		if end := start + bitmapSize + blockSize; end > usize {
			return invalidf(VHD, "block %d is stored at bytes %d..%d, past the end of the %d-byte file (truncated image?)", i, start, end, size)
		}
	}
	return nil
}
