package format

import (
	"bytes"
	"encoding/binary"
	"strings"
)

// VMDK sparse extent header (little endian), from VMware's "Virtual Disk
// Format 1.1" specification; limits and quirks as qemu's vmdk driver reads
// it.
const (
	vmdkHeaderLen      = 512
	vmdkSector         = 512
	vmdkMaxGTEsPerGT   = 512 // qemu refuses larger grain tables
	vmdkMaxGrainSector = 1 << 16
	// qemu reads at most 1 MiB - 1 bytes of descriptor text.
	vmdkMaxDescBytes = 1<<20 - 1
	// vmdkGDAtEnd in the header's grain directory offset says the real
	// header is the footer at the end of the file (streamOptimized).
	vmdkGDAtEnd = ^uint64(0)

	vmdkFlagRedundantGD = 1 << 1
	vmdkFlagZeroGrain   = 1 << 2
	vmdkFlagMarkers     = 1 << 17
	vmdkCompressDeflate = 1

	// Whatever the header says, qemu looks for a parent ("backing file")
	// and the CIDs in this window of a sparse file: DESC_SIZE bytes at
	// 0x200 (vmdk_parent_open).
	vmdkParentScanOffset = 0x200
	vmdkParentScanLen    = 20 * vmdkSector
)

// vmdkSparseHeader is the decoded sparse extent header (or footer).
type vmdkSparseHeader struct {
	magic      []byte
	version    uint32
	flags      uint32
	capacity   uint64 // sectors
	grain      uint64 // sectors
	descOffset uint64 // sectors
	descSize   uint64 // sectors
	gtesPerGT  uint32
	rgdOffset  uint64 // sectors
	gdOffset   uint64 // sectors
	overhead   uint64 // sectors before the first grain
	compress   uint16
}

// decodeVMDKSparseHeader reads the 512-byte header b (magic first).
func decodeVMDKSparseHeader(b []byte) vmdkSparseHeader {
	le := binary.LittleEndian
	return vmdkSparseHeader{
		magic:      b[0:4],
		version:    le.Uint32(b[4:]),
		flags:      le.Uint32(b[8:]),
		capacity:   le.Uint64(b[12:]),
		grain:      le.Uint64(b[20:]),
		descOffset: le.Uint64(b[28:]),
		descSize:   le.Uint64(b[36:]),
		gtesPerGT:  le.Uint32(b[44:]),
		rgdOffset:  le.Uint64(b[48:]),
		gdOffset:   le.Uint64(b[56:]),
		overhead:   le.Uint64(b[64:]),
		compress:   le.Uint16(b[77:]),
	}
}

// validate checks the fields that do not need the rest of the file.
func (h vmdkSparseHeader) validate() error {
	const f = VMDK
	if !bytes.Equal(h.magic, magicVMDK) {
		return invalidf(f, "bad magic")
	}
	if h.version < 1 || h.version > 3 {
		return unsupportedf(f, "sparse header version %d", h.version)
	}
	if h.capacity == 0 {
		if h.descOffset != 0 || h.descSize != 0 {
			// qemu opens such a header's descriptor as a descriptor
			// file, with whatever extent files it names.
			return unsafef(f, "sparse header of capacity 0 carries a descriptor (qemu would open the extents it names)")
		}
		return invalidf(f, "capacity is 0: the disk is empty")
	}
	if h.capacity > 1<<53 {
		return unsafef(f, "capacity of %d sectors is absurd", h.capacity)
	}
	if h.grain == 0 || h.grain > vmdkMaxGrainSector || h.grain&(h.grain-1) != 0 {
		return invalidf(f, "grain size of %d sectors", h.grain)
	}
	if h.gtesPerGT == 0 || h.gtesPerGT > vmdkMaxGTEsPerGT {
		return invalidf(f, "%d grain table entries per grain table", h.gtesPerGT)
	}
	if h.compress > vmdkCompressDeflate {
		return unsupportedf(f, "compression algorithm %d", h.compress)
	}
	if h.descOffset == 0 && h.descSize != 0 {
		return invalidf(f, "descriptor of %d sectors at offset 0", h.descSize)
	}
	if h.descOffset != 0 {
		// Every sparse vmdk puts its descriptor right after the header,
		// and qemu reads the parent and CIDs from there whatever the
		// header says: anywhere else, the two readers would disagree.
		if h.descOffset != 1 {
			return unsafef(f, "embedded descriptor at sector %d, not right after the header", h.descOffset)
		}
		if h.descSize == 0 || h.descSize*vmdkSector > vmdkMaxDescBytes {
			return invalidf(f, "embedded descriptor of %d sectors (at most %d bytes allowed)", h.descSize, vmdkMaxDescBytes)
		}
	}
	return nil
}

func (h vmdkSparseHeader) compressed() bool { return h.compress == vmdkCompressDeflate }

// parseVMDKHeader checks a sparse vmdk's header and embedded descriptor
// from the first bytes of the file (head holds the whole file when it is
// shorter than head's usual length).
func parseVMDKHeader(head []byte) (Header, error) {
	const f = VMDK
	if err := needHead(f, head, vmdkHeaderLen, "sparse header"); err != nil {
		return Header{}, err
	}
	if !bytes.HasPrefix(head, magicVMDK) {
		return Header{}, invalidf(f, "bad magic")
	}
	sh := decodeVMDKSparseHeader(head)
	if err := sh.validate(); err != nil {
		return Header{}, err
	}
	if err := checkVMDKParentWindow(head); err != nil {
		return Header{}, err
	}
	h := Header{Format: f, VirtualSize: int64(sh.capacity) * vmdkSector, GrainSize: int64(sh.grain) * vmdkSector}
	if sh.descOffset == 0 {
		// No embedded descriptor: qemu uses the extent on its own.
		return h, nil
	}
	desc, err := embeddedVMDKDescriptor(head, sh)
	if err != nil {
		return Header{}, err
	}
	ct, err := checkVMDKDescriptor(desc)
	if err != nil {
		return Header{}, err
	}
	h.VMDKCreateType = ct
	return h, nil
}

// IsStreamOptimizedVMDK reports whether an image of format f with header h
// is a vmdk of deflated grains, its tables after them (createType
// streamOptimized, in any case as VMware writes it): the one vmdk a
// forward-only reader decodes, and one qemu-img reads a small grain at a
// time.
func IsStreamOptimizedVMDK(f Format, h Header) bool {
	return f == VMDK && strings.EqualFold(h.VMDKCreateType, "streamOptimized")
}

// embeddedVMDKDescriptor returns the descriptor text as qemu reads it: from
// the descriptor's offset up to the first NUL byte. The text must end (NUL)
// inside the sectors the header gives it and inside head, or qemu would
// read on into grain data that our check never saw.
func embeddedVMDKDescriptor(head []byte, sh vmdkSparseHeader) ([]byte, error) {
	start, end := sh.descOffset*vmdkSector, (sh.descOffset+sh.descSize)*vmdkSector
	if end > uint64(len(head)) {
		return nil, invalidf(VMDK, "embedded descriptor (bytes %d..%d) lies beyond the end of the file or the %d bytes examined", start, end, len(head))
	}
	desc := head[start:end]
	i := bytes.IndexByte(desc, 0)
	if i < 0 {
		return nil, unsafef(VMDK, "embedded descriptor fills its %d sectors without a terminating NUL (qemu would read past them)", sh.descSize)
	}
	return desc[:i], nil
}

// checkVMDKParentWindow refuses a parent named anywhere in the window qemu
// searches for one, comment or grain data included.
func checkVMDKParentWindow(head []byte) error {
	if len(head) <= vmdkParentScanOffset {
		return nil
	}
	w := head[vmdkParentScanOffset:min(len(head), vmdkParentScanOffset+vmdkParentScanLen)]
	if i := bytes.IndexByte(w, 0); i >= 0 {
		w = w[:i]
	}
	if bytes.Contains(bytes.ToLower(w), []byte("parentfilenamehint")) {
		return unsafef(VMDK, "descriptor names a parent file (parentFileNameHint)")
	}
	return nil
}
