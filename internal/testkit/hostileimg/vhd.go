package hostileimg

import (
	"bufio"
	"encoding/binary"
	"io"
)

// VHDManyBlocks writes the head of a dynamic VHD of virtualSize bytes
// (creator "qem2": current_size is the size) with 512-byte blocks and a
// block allocation table of entries entries, every one allocated, each
// block stored after the one before; the stream ends after the table. A
// table may name more blocks than the disk holds: 3.3 million entries
// (13 MB of table, about 1 MB as xz) are what a 64 MiB bookkeeping budget
// at 20 bytes an entry allows.
func VHDManyBlocks(w io.Writer, virtualSize int64, entries int) error {
	head := VHDHead(virtualSize, entries, 512)
	be := binary.BigEndian
	batSectors := (uint64(entries)*4 + 511) / 512
	first := uint64(len(head))/512 + batSectors
	return buffered(w, func(w *bufio.Writer) error {
		w.Write(head)
		var e [4]byte
		for i := range uint64(entries) {
			// A sector bitmap and the block's one sector of data.
			be.PutUint32(e[:], uint32(first+2*i))
			if _, err := w.Write(e[:]); err != nil {
				return err
			}
		}
		return zeros(w, int64(batSectors*512-uint64(entries)*4))
	})
}

// VHDHead is the first 1536 bytes of a dynamic VHD of virtualSize bytes
// whose block allocation table, of entries blocks of blockSize bytes,
// follows them: the copy of the footer (creator "qem2", so current_size is
// the disk's size) and the dynamic header, checksums set. Its first 512
// bytes are also the footer that ends the file.
func VHDHead(virtualSize int64, entries int, blockSize uint32) []byte {
	const headLen = 512 + 1024
	be := binary.BigEndian
	footer := make([]byte, 512, headLen)
	copy(footer, "conectix")
	be.PutUint32(footer[8:], 2)        // features: the reserved bit
	be.PutUint32(footer[12:], 0x10000) // version 1.0
	be.PutUint64(footer[16:], 512)     // data offset: the dynamic header
	copy(footer[28:], "qem2")
	be.PutUint64(footer[40:], uint64(virtualSize))
	be.PutUint64(footer[48:], uint64(virtualSize))
	be.PutUint16(footer[56:], 16) // geometry (not used for "qem2")
	footer[58], footer[59] = 4, 17
	be.PutUint32(footer[60:], 3) // dynamic
	be.PutUint32(footer[64:], ^byteSum(footer))
	dyn := make([]byte, 1024)
	copy(dyn, "cxsparse")
	be.PutUint64(dyn[8:], ^uint64(0))
	be.PutUint64(dyn[16:], headLen)
	be.PutUint32(dyn[24:], 0x10000)
	be.PutUint32(dyn[28:], uint32(entries))
	be.PutUint32(dyn[32:], blockSize)
	be.PutUint32(dyn[36:], ^byteSum(dyn))
	return append(footer, dyn...)
}

func byteSum(b []byte) uint32 {
	var s uint32
	for _, c := range b {
		s += uint32(c)
	}
	return s
}
