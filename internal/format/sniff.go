package format

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/diskimport/engine/errdefs"
)

// Magic numbers and where they sit.
var (
	magicGzip     = []byte{0x1f, 0x8b}
	magicXZ       = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	magicZstd     = []byte{0x28, 0xb5, 0x2f, 0xfd}
	magicLZ4      = []byte{0x04, 0x22, 0x4d, 0x18}
	magicQCOW2    = []byte{'Q', 'F', 'I', 0xfb}
	magicVMDK     = []byte{'K', 'D', 'M', 'V'}
	magicVMDKDesc = []byte("# Disk DescriptorFile")
	magicVHDX     = []byte("vhdxfile")
	magicVHD      = []byte("conectix")
	magicISO      = []byte("CD001")
)

const (
	vdiSignature    = 0xbeda107f
	vdiSignatureOff = 0x40
	isoMagicOff     = 0x8001

	// zstd skippable frames (pzstd starts its output with one) carry a
	// little-endian magic 0x184D2A50..0x184D2A5F and a 32-bit length.
	zstdSkippableMask  = 0xfffffff0
	zstdSkippableMagic = 0x184d2a50
	zstdSkippableHead  = 8
)

// DefaultPeekSize is how much of a stream Open looks at before deciding: it
// must reach the ISO 9660 volume descriptor at 0x8001.
const DefaultPeekSize = 64 << 10

// Sniff looks at the first bytes of a stream and reports either a
// compression wrapper (Format is then empty) or an image format (Compression
// is then None). A head shorter than a magic simply does not match it, so
// tiny streams come out as Raw. A head that matches more than one image
// format is reported as the first; Detect refuses it.
func Sniff(head []byte) (Compression, Format) {
	c, f, _ := detect(head)
	return c, f
}

// Detect is Sniff that refuses a head matching more than one image format
// (an ISO with a qcow2 header in its system area, say): which one qemu-img
// or a firmware would see is a guess, and guessing is what an attacker
// relies on.
func Detect(head []byte) (Compression, Format, error) {
	c, f, also := detect(head)
	if len(also) > 0 {
		names := []string{string(f)}
		for _, a := range also {
			names = append(names, string(a))
		}
		return None, "", fmt.Errorf("format: the image matches more than one format (%s), refusing to guess: %w", strings.Join(names, ", "), errdefs.ErrUnsafeImage)
	}
	return c, f, nil
}

// detect returns the compression or the first matching image format, and
// any further image formats the head also matches.
func detect(head []byte) (Compression, Format, []Format) {
	switch {
	case bytes.HasPrefix(head, magicGzip):
		return Gzip, "", nil
	case bytes.HasPrefix(head, magicXZ):
		return XZ, "", nil
	case bytes.HasPrefix(head, magicZstd), startsWithZstdSkippable(head):
		return Zstd, "", nil
	case bytes.HasPrefix(head, magicLZ4) && len(head) > len(magicLZ4) && head[len(magicLZ4)]>>6 == 1:
		// The frame descriptor's version bits are 01.
		return LZ4, "", nil
	}
	var found []Format
	if f := sniffAtStart(head); f != "" {
		found = append(found, f)
	}
	if len(head) >= vdiSignatureOff+4 && binary.LittleEndian.Uint32(head[vdiSignatureOff:]) == vdiSignature {
		found = append(found, VDI)
	}
	if len(head) >= isoMagicOff+len(magicISO) && bytes.Equal(head[isoMagicOff:isoMagicOff+len(magicISO)], magicISO) {
		found = append(found, ISO)
	}
	if len(found) == 0 {
		return None, Raw, nil
	}
	return None, found[0], found[1:]
}

// sniffAtStart names the image format whose magic starts head, or "".
func sniffAtStart(head []byte) Format {
	if f := sniffForeign(head); f != "" {
		return f
	}
	return byMagic(head, imageMagics)
}

// imageMagics are the accepted formats known by their first bytes.
var imageMagics = []magicFormat{
	{magicQCOW2, QCOW2}, {magicVMDK, VMDK}, {magicVMDKDesc, VMDKDescriptor}, {magicVHDX, VHDX}, {magicVHD, VHD},
}

// startsWithZstdSkippable reports whether head opens with one or more zstd
// skippable frames followed by a zstd frame (or by more skippable data than
// head holds). Requiring what follows keeps a raw disk that merely starts
// with those four bytes from being taken for zstd.
func startsWithZstdSkippable(head []byte) bool {
	le := binary.LittleEndian
	seen := false
	for off := uint64(0); ; {
		rest := head[off:]
		if seen && bytes.HasPrefix(rest, magicZstd) {
			return true
		}
		if len(rest) < zstdSkippableHead || le.Uint32(rest)&zstdSkippableMask != zstdSkippableMagic {
			return false
		}
		seen = true
		off += zstdSkippableHead + uint64(le.Uint32(rest[4:]))
		if off >= uint64(len(head)) {
			// The skippable frames fill what was peeked (or the whole,
			// tiny stream): the decoder has the last word.
			return true
		}
	}
}
