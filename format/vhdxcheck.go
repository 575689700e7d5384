package format

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
)

// VHDX region tables (MS-VHDX 2.2.3): two copies of 64 KiB at 192 and 256
// KiB, each a "regi" header (signature, CRC-32C, entry count) and 32-byte
// entries (GUID, file offset, length, required flag).
const (
	vhdxRegionTable1    = 192 << 10
	vhdxRegionTable2    = 256 << 10
	vhdxRegionTableLen  = 64 << 10
	vhdxRegionEntryLen  = 32
	vhdxRegionHeaderLen = 16
	vhdxMaxRegions      = 2047 // the specification's limit
	vhdxRegionAlign     = 1 << 20
)

// GUIDs of the two regions every VHDX has, as they are stored (the first
// three fields little endian).
var (
	vhdxBATRegion      = []byte{0x66, 0x77, 0xc2, 0x2d, 0x23, 0xf6, 0x00, 0x42, 0x9d, 0x64, 0x11, 0x5e, 0x9b, 0xfd, 0x4a, 0x08}
	vhdxMetadataRegion = []byte{0x06, 0xa2, 0x7c, 0x8b, 0x90, 0x47, 0x9a, 0x4b, 0xb8, 0xfe, 0x57, 0x5f, 0x05, 0x0f, 0x88, 0x6e}
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// CheckVHDX checks the region tables of a VHDX of size bytes: a valid
// copy ("regi" signature, CRC-32C, fewer than 2048 entries), whose BAT and
// metadata regions are present, aligned and inside the file, as
// OpenStack's format inspector requires. qemu-img already refuses a VHDX
// whose BAT points past the end of the file, so payload blocks are its job.
func CheckVHDX(r io.ReaderAt, size int64) error {
	if size < vhdxRegionTable2+vhdxRegionTableLen {
		return invalidf(VHDX, "file of %d bytes ends before its region tables (truncated image?)", size)
	}
	var firstErr error
	for _, off := range []int64{vhdxRegionTable1, vhdxRegionTable2} {
		err := checkVHDXRegionTable(r, off, size)
		if err == nil {
			return nil // qemu uses the first valid copy
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

func checkVHDXRegionTable(r io.ReaderAt, off, size int64) error {
	t := make([]byte, vhdxRegionTableLen)
	if _, err := r.ReadAt(t, off); err != nil {
		return fmt.Errorf("vhdx: reading the region table at %d: %w", off, readFailure(err))
	}
	le := binary.LittleEndian
	if !bytes.HasPrefix(t, []byte("regi")) {
		return invalidf(VHDX, "region table at %d has no \"regi\" signature", off)
	}
	want := le.Uint32(t[4:])
	clear(t[4:8])
	if got := crc32.Checksum(t, crc32c); got != want {
		return invalidf(VHDX, "region table at %d: checksum %#x, expected %#x", off, got, want)
	}
	n := le.Uint32(t[8:])
	if n > vhdxMaxRegions {
		return unsafef(VHDX, "region table at %d has %d entries, more than %d", off, n, vhdxMaxRegions)
	}
	var bat, meta bool
	for i := uint32(0); i < n; i++ {
		e := t[vhdxRegionHeaderLen+i*vhdxRegionEntryLen:]
		start, length := le.Uint64(e[16:]), uint64(le.Uint32(e[24:]))
		if start%vhdxRegionAlign != 0 || length%vhdxRegionAlign != 0 || start < vhdxRegionAlign {
			return invalidf(VHDX, "region %d at %d (+%d) is not aligned to 1 MiB", i, start, length)
		}
		if start > uint64(size) || length > uint64(size)-start {
			return invalidf(VHDX, "region %d at %d..%d lies past the end of the %d-byte file (truncated image?)", i, start, start+length, size)
		}
		bat = bat || bytes.Equal(e[:16], vhdxBATRegion)
		meta = meta || bytes.Equal(e[:16], vhdxMetadataRegion)
	}
	if !bat || !meta {
		return invalidf(VHDX, "region table at %d lacks the BAT or the metadata region", off)
	}
	return nil
}
