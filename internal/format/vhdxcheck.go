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
		meta, err := checkVHDXRegionTable(r, off, size)
		if err == nil {
			// qemu uses the first valid copy.
			return checkVHDXMetadata(r, meta)
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// checkVHDXRegionTable checks the region table at off and returns the
// offset of the metadata region.
func checkVHDXRegionTable(r io.ReaderAt, off, size int64) (int64, error) {
	t := make([]byte, vhdxRegionTableLen)
	if _, err := r.ReadAt(t, off); err != nil {
		return 0, fmt.Errorf("vhdx: reading the region table at %d: %w", off, readFailure(err))
	}
	le := binary.LittleEndian
	if !bytes.HasPrefix(t, []byte("regi")) {
		return 0, invalidf(VHDX, "region table at %d has no \"regi\" signature", off)
	}
	want := le.Uint32(t[4:])
	clear(t[4:8])
	if got := crc32.Checksum(t, crc32c); got != want {
		return 0, invalidf(VHDX, "region table at %d: checksum %#x, expected %#x", off, got, want)
	}
	n := le.Uint32(t[8:])
	if n > vhdxMaxRegions {
		return 0, unsafef(VHDX, "region table at %d has %d entries, more than %d", off, n, vhdxMaxRegions)
	}
	var bat bool
	meta := int64(-1)
	for i := uint32(0); i < n; i++ {
		e := t[vhdxRegionHeaderLen+i*vhdxRegionEntryLen:]
		start, length := le.Uint64(e[16:]), uint64(le.Uint32(e[24:]))
		if start%vhdxRegionAlign != 0 || length%vhdxRegionAlign != 0 || start < vhdxRegionAlign {
			return 0, invalidf(VHDX, "region %d at %d (+%d) is not aligned to 1 MiB", i, start, length)
		}
		if start > uint64(size) || length > uint64(size)-start {
			return 0, invalidf(VHDX, "region %d at %d..%d lies past the end of the %d-byte file (truncated image?)", i, start, start+length, size)
		}
		bat = bat || bytes.Equal(e[:16], vhdxBATRegion)
		if bytes.Equal(e[:16], vhdxMetadataRegion) {
			meta = int64(start)
		}
	}
	if !bat || meta < 0 {
		return 0, invalidf(VHDX, "region table at %d lacks the BAT or the metadata region", off)
	}
	return meta, nil
}

// The metadata table (MS-VHDX 2.6.1) opens the metadata region: "metadata",
// an entry count, then 32-byte entries (item GUID, offset from the region
// start, length, flags).
const (
	vhdxMetadataTableLen = 64 << 10
	vhdxMetadataEntryLen = 32
	vhdxMetadataHeadLen  = 32
	vhdxHasParent        = 1 << 1 // File Parameters flags
)

// vhdxFileParameters is the GUID of the File Parameters item, as stored.
var vhdxFileParameters = []byte{0x37, 0x67, 0xa1, 0xca, 0x36, 0xfa, 0x43, 0x4d, 0xb3, 0xb6, 0x33, 0xf0, 0xaa, 0x44, 0xe7, 0x6b}

// checkVHDXMetadata refuses a differencing VHDX (File Parameters with
// HasParent): it reads its parent from elsewhere, which qemu-img can only
// fail on with "Operation not supported".
func checkVHDXMetadata(r io.ReaderAt, off int64) error {
	t := make([]byte, vhdxMetadataTableLen)
	if _, err := r.ReadAt(t, off); err != nil {
		return fmt.Errorf("vhdx: reading the metadata table at %d: %w", off, readFailure(err))
	}
	if !bytes.HasPrefix(t, []byte("metadata")) {
		return invalidf(VHDX, "metadata table at %d has no \"metadata\" signature", off)
	}
	le := binary.LittleEndian
	n := int(le.Uint16(t[10:]))
	if n > vhdxMaxRegions {
		return unsafef(VHDX, "metadata table has %d entries, more than %d", n, vhdxMaxRegions)
	}
	for i := 0; i < n; i++ {
		e := t[vhdxMetadataHeadLen+i*vhdxMetadataEntryLen:]
		if !bytes.Equal(e[:16], vhdxFileParameters) {
			continue
		}
		var params [8]byte
		if _, err := r.ReadAt(params[:], off+int64(le.Uint32(e[16:]))); err != nil {
			return fmt.Errorf("vhdx: reading the file parameters: %w", readFailure(err))
		}
		if le.Uint32(params[4:])&vhdxHasParent != 0 {
			return unsafef(VHDX, "differencing disk refers to a parent image")
		}
		return nil
	}
	return invalidf(VHDX, "metadata table lacks the file parameters")
}
