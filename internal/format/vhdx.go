package format

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"strings"
)

// parseVHDXHeader only checks the file identifier: the virtual size sits in
// the metadata region, which lies beyond the first 64 KiB.
func parseVHDXHeader(head []byte) (Header, error) {
	if err := needHead(VHDX, head, 8, "file identifier"); err != nil {
		return Header{}, err
	}
	if string(head[:8]) != string(magicVHDX) {
		return Header{}, invalidf(VHDX, "bad file identifier")
	}
	return Header{Format: VHDX, VirtualSize: -1}, nil
}

// The VHDX structures both the structure check (CheckVHDX, at random) and
// the stream decoder (internal/streamdecode) read, decoded here once
// (MS-VHDX, little endian). The first MiB holds the file identifier, two
// headers (64 and 128 KiB) and two copies of the region table (192 and 256
// KiB); the regions the table names (BAT, metadata) lie at 1 MiB multiples
// after it. What each reader then requires of the entries (which copy it
// trusts, bounds, unknown kinds) is its own rule.
const (
	VHDXHeader1          = 64 << 10
	VHDXHeader2          = 128 << 10
	VHDXHeaderLen        = 4 << 10
	VHDXRegionTable1     = 192 << 10
	VHDXRegionTable2     = 256 << 10
	VHDXRegionTableLen   = 64 << 10
	VHDXMetadataTableLen = 64 << 10 // at the start of the metadata region
	VHDXMaxEntries       = 2047     // of a region or metadata table: the specification's limit

	vhdxRegionHeaderLen   = 16 // "regi", CRC-32C, entry count, reserved
	vhdxRegionEntryLen    = 32 // GUID, file offset, length, flags
	vhdxMetadataHeadLen   = 32 // "metadata", reserved, entry count, reserved
	vhdxMetadataEntryLen  = 32 // item GUID, offset, length, flags
	vhdxRegionRequired    = 1 << 0
	vhdxMetadataRequired  = 1 << 2
	VHDXHasParent         = 1 << 1 // a flag of the File Parameters item: a differencing disk
	vhdxChecksumFieldFrom = 4      // the CRC-32C of a header or region table: bytes 4..8
)

// GUIDs of the regions and metadata items, as stored (the first three
// fields little endian).
var (
	VHDXBATRegion          = vhdxGUID("2DC27766-F623-4200-9D64-115E9BFD4A08")
	VHDXMetadataRegion     = vhdxGUID("8B7CA206-4790-4B9A-B8FE-575F050F886E")
	VHDXFileParameters     = vhdxGUID("CAA16737-FA36-4D43-B3B6-33F0AA44E76B")
	VHDXVirtualDiskSize    = vhdxGUID("2FA54224-CD1B-4876-B211-5DBED83BF4B8")
	VHDXPage83Data         = vhdxGUID("BECA12AB-B2E6-4523-93EF-C309E000C746")
	VHDXLogicalSectorSize  = vhdxGUID("8141BF1D-A96F-4709-BA47-F233A8FAAB5F")
	VHDXPhysicalSectorSize = vhdxGUID("CDA348C7-445D-4471-9CC9-E9885251C556")
	VHDXParentLocator      = vhdxGUID("A8D35F2D-B30B-454D-ABF7-D3D84834AB0C")
)

// vhdxGUID turns a GUID's text form into its stored bytes.
func vhdxGUID(s string) [16]byte {
	raw, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(raw) != 16 {
		panic("vhdx: bad GUID literal " + s)
	}
	b := [16]byte(raw)
	// Data1, Data2, Data3 are little endian.
	b[0], b[1], b[2], b[3] = b[3], b[2], b[1], b[0]
	b[4], b[5] = b[5], b[4]
	b[6], b[7] = b[7], b[6]
	return b
}

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// vhdxChecksum returns the CRC-32C of a header or region table b, computed
// with its checksum field zeroed (b is not changed), and the value stored
// in that field.
func vhdxChecksum(b []byte) (got, stored uint32) {
	stored = binary.LittleEndian.Uint32(b[vhdxChecksumFieldFrom:])
	var zero [4]byte
	h := crc32.New(crc32c)
	h.Write(b[:vhdxChecksumFieldFrom])
	h.Write(zero[:])
	h.Write(b[vhdxChecksumFieldFrom+4:])
	return h.Sum32(), stored
}

// VHDXIntact reports whether b, a header (VHDXHeaderLen bytes, signature
// "head") or a region table, starts with its signature and holds its own
// CRC-32C.
func VHDXIntact(b []byte, signature string) bool {
	if !bytes.HasPrefix(b, []byte(signature)) {
		return false
	}
	got, stored := vhdxChecksum(b)
	return got == stored
}

// A VHDXRegion is an entry of the region table (MS-VHDX 2.2.3.2), as stored.
type VHDXRegion struct {
	GUID     [16]byte
	Start    uint64 // file offset
	Length   uint64
	Required bool // a reader that does not know the region must refuse the file
}

// ParseVHDXRegionTable decodes a copy of the region table, t
// (VHDXRegionTableLen bytes read at off). A copy without its "regi"
// signature or CRC-32C is ErrInvalidImage. count is the number of entries
// the table claims; beyond VHDXMaxEntries it cannot hold them, regions is
// nil and the caller refuses the table in its own terms.
func ParseVHDXRegionTable(t []byte, off int64) (regions []VHDXRegion, count uint32, err error) {
	if !bytes.HasPrefix(t, []byte("regi")) {
		return nil, 0, invalidf(VHDX, "region table at %d has no \"regi\" signature", off)
	}
	if got, want := vhdxChecksum(t); got != want {
		return nil, 0, invalidf(VHDX, "region table at %d: checksum %#x, expected %#x", off, got, want)
	}
	le := binary.LittleEndian
	count = le.Uint32(t[8:])
	if count > VHDXMaxEntries {
		return nil, count, nil
	}
	regions = make([]VHDXRegion, count)
	for i := range regions {
		e := t[vhdxRegionHeaderLen+i*vhdxRegionEntryLen:]
		regions[i] = VHDXRegion{
			GUID:     [16]byte(e[:16]),
			Start:    le.Uint64(e[16:]),
			Length:   uint64(le.Uint32(e[24:])),
			Required: le.Uint32(e[28:])&vhdxRegionRequired != 0,
		}
	}
	return regions, count, nil
}

// A VHDXMetadataEntry is an entry of the metadata table (MS-VHDX 2.6.1.2):
// an item, at Offset from the start of the metadata region.
type VHDXMetadataEntry struct {
	GUID     [16]byte
	Offset   uint64
	Length   uint64
	Required bool // a reader that does not know the item must refuse the file
}

// ParseVHDXMetadataTable decodes the metadata table at the start of t, the
// metadata region (at least VHDXMetadataTableLen bytes): ok is false when t
// is shorter or lacks the "metadata" signature. count is the number of
// entries the table claims; beyond VHDXMaxEntries, entries is nil and the
// caller refuses the table in its own terms.
func ParseVHDXMetadataTable(t []byte) (entries []VHDXMetadataEntry, count int, ok bool) {
	if len(t) < VHDXMetadataTableLen || !bytes.HasPrefix(t, []byte("metadata")) {
		return nil, 0, false
	}
	le := binary.LittleEndian
	count = int(le.Uint16(t[10:]))
	if count > VHDXMaxEntries {
		return nil, count, true
	}
	entries = make([]VHDXMetadataEntry, count)
	for i := range entries {
		e := t[vhdxMetadataHeadLen+i*vhdxMetadataEntryLen:]
		entries[i] = VHDXMetadataEntry{
			GUID:     [16]byte(e[:16]),
			Offset:   uint64(le.Uint32(e[16:])),
			Length:   uint64(le.Uint32(e[20:])),
			Required: le.Uint32(e[24:])&vhdxMetadataRequired != 0,
		}
	}
	return entries, count, true
}
