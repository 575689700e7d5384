package format

import (
	"bytes"
	"encoding/binary"
	"io"
)

// VHD footer / dynamic header layout (big endian), from Microsoft's "Virtual
// Hard Disk Image Format Specification".
const (
	vhdFooterLen    = 512
	vhdDynHeaderLen = 1024
	vhdChecksumOff  = 64

	vhdTypeFixed        = 2
	vhdTypeDynamic      = 3
	vhdTypeDifferencing = 4

	// qemu's VHD_MAX_GEOMETRY: 65535 cylinders * 16 heads * 255 sectors.
	vhdMaxGeometrySectors = 65535 * 16 * 255
)

// vhdFooterChecksumOK verifies the one's complement byte-sum checksum of a
// 512-byte footer (the checksum field itself counts as zero).
func vhdFooterChecksumOK(footer []byte) bool {
	return vhdChecksum(footer, vhdChecksumOff) == binary.BigEndian.Uint32(footer[vhdChecksumOff:])
}

func vhdChecksum(b []byte, skip int) uint32 {
	var sum uint32
	for i, c := range b {
		if i >= skip && i < skip+4 {
			continue
		}
		sum += uint32(c)
	}
	return ^sum
}

// vhdVirtualSize reproduces how qemu's vpc driver sizes a disk: images from
// Virtual PC and old qemu are sized by their CHS geometry, the others by
// current_size (see block/vpc.c).
func vhdVirtualSize(footer []byte) int64 {
	be := binary.BigEndian
	creator := string(footer[28:32])
	cyls := int64(be.Uint16(footer[56:]))
	heads := int64(footer[58])
	spt := int64(footer[59])
	chs := cyls * heads * spt
	current := int64(be.Uint64(footer[48:]))
	useCHS := creator != "win " && creator != "qem2" && creator != "d2v " &&
		creator != "CTXS" && creator != "tap\x00"
	if !useCHS || chs == vhdMaxGeometrySectors {
		return current / 512 * 512
	}
	return chs * 512
}

func parseVHDHeader(head []byte) (Header, error) {
	const f = VHD
	be := binary.BigEndian
	if err := needHead(f, head, vhdFooterLen, "footer copy"); err != nil {
		return Header{}, err
	}
	footer := head[:vhdFooterLen]
	if !bytes.HasPrefix(footer, magicVHD) {
		return Header{}, invalidf(f, "bad cookie")
	}
	if !vhdFooterChecksumOK(footer) {
		return Header{}, invalidf(f, "footer checksum mismatch")
	}
	diskType := be.Uint32(footer[60:])
	switch diskType {
	case vhdTypeDynamic:
	case vhdTypeDifferencing:
		return Header{}, unsafef(f, "differencing disk refers to a parent image")
	case vhdTypeFixed:
		// A fixed VHD has its footer at the end only; one at offset 0 is
		// not something qemu opens as a disk.
		return Header{}, invalidf(f, "fixed-disk footer at the start of the image")
	default:
		return Header{}, unsupportedf(f, "disk type %d", diskType)
	}
	dataOff := be.Uint64(footer[16:])
	if dataOff != vhdFooterLen {
		// qemu reads the dynamic header wherever data_offset points; we
		// insist on the place every writer uses, so it is in the head.
		return Header{}, invalidf(f, "dynamic header at offset %d, expected 512", dataOff)
	}
	if err := needHead(f, head, vhdFooterLen+vhdDynHeaderLen, "dynamic header"); err != nil {
		return Header{}, err
	}
	dyn := head[vhdFooterLen : vhdFooterLen+vhdDynHeaderLen]
	if !bytes.HasPrefix(dyn, []byte("cxsparse")) {
		return Header{}, invalidf(f, "bad dynamic header cookie")
	}
	if vhdChecksum(dyn, 36) != be.Uint32(dyn[36:]) {
		return Header{}, invalidf(f, "dynamic header checksum mismatch")
	}
	blockSize := be.Uint32(dyn[32:])
	if blockSize < 512 || blockSize&(blockSize-1) != 0 || blockSize > 256<<20 {
		return Header{}, invalidf(f, "block size %d", blockSize)
	}
	size := vhdVirtualSize(footer)
	if size < 0 || size > 2040<<30 {
		// The format's own limit is 2040 GiB.
		return Header{}, invalidf(f, "virtual size %d beyond the 2040 GiB VHD limit", size)
	}
	maxEntries := uint64(be.Uint32(dyn[28:]))
	if maxEntries*uint64(blockSize) < uint64(size) {
		return Header{}, invalidf(f, "block table of %d entries cannot cover %d bytes", maxEntries, size)
	}
	return Header{Format: f, VirtualSize: size, VHDDiskType: diskType}, nil
}

// FixedVHDFooterLen is the footer a fixed VHD carries after its raw data:
// the bytes a raw stream holds back until its end to tell it from data.
const FixedVHDFooterLen = vhdFooterLen

// CheckRawEnd judges the last FixedVHDFooterLen bytes of a raw image
// (tail), with dataLen bytes before them: a DMG's trailer refuses the image
// (CheckTrailer), a fixed VHD's footer describing exactly dataLen bytes is
// not part of the disk (footer true), anything else is data.
func CheckRawEnd(tail []byte, dataLen int64) (footer bool, err error) {
	if err := CheckTrailer(tail); err != nil {
		return false, err
	}
	return IsFixedVHDFooter(tail, dataLen), nil
}

// RawDiskSize is the size of the disk in a raw image of size bytes that can
// be read at random (a local file or device): size less a fixed VHD's
// footer at its end, or CheckRawEnd's refusal of a DMG.
func RawDiskSize(r io.ReaderAt, size int64) (int64, error) {
	if size < FixedVHDFooterLen {
		return size, nil
	}
	tail := make([]byte, FixedVHDFooterLen)
	if _, err := r.ReadAt(tail, size-FixedVHDFooterLen); err != nil {
		return 0, err
	}
	footer, err := CheckRawEnd(tail, size-FixedVHDFooterLen)
	if err != nil {
		return 0, err
	}
	if footer {
		return size - FixedVHDFooterLen, nil
	}
	return size, nil
}

// IsFixedVHDFooter reports whether tail (the last 512 bytes of a stream) is
// a valid fixed-VHD footer describing exactly dataLen bytes of raw data in
// front of it, so the caller can leave it out of the disk.
func IsFixedVHDFooter(tail []byte, dataLen int64) bool {
	if len(tail) != vhdFooterLen || !bytes.HasPrefix(tail, magicVHD) {
		return false
	}
	be := binary.BigEndian
	if be.Uint32(tail[60:]) != vhdTypeFixed {
		return false
	}
	if be.Uint64(tail[16:]) != ^uint64(0) {
		return false // fixed disks have no data offset
	}
	if int64(be.Uint64(tail[48:])) != dataLen {
		return false
	}
	return vhdFooterChecksumOK(tail)
}
