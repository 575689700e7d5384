package format

import (
	"bytes"
	"encoding/binary"
)

// Magic numbers and where they sit.
var (
	magicGzip     = []byte{0x1f, 0x8b}
	magicXZ       = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	magicZstd     = []byte{0x28, 0xb5, 0x2f, 0xfd}
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
)

// DefaultPeekSize is how much of a stream Open looks at before deciding: it
// must reach the ISO 9660 volume descriptor at 0x8001.
const DefaultPeekSize = 64 << 10

// Sniff looks at the first bytes of a stream and reports either a
// compression wrapper (Format is then empty) or an image format (Compression
// is then None). A head shorter than a magic simply does not match it, so
// tiny streams come out as Raw.
func Sniff(head []byte) (Compression, Format) {
	switch {
	case bytes.HasPrefix(head, magicGzip):
		return Gzip, ""
	case bytes.HasPrefix(head, magicXZ):
		return XZ, ""
	case bytes.HasPrefix(head, magicZstd):
		return Zstd, ""
	case bytes.HasPrefix(head, magicQCOW2):
		return None, QCOW2
	case bytes.HasPrefix(head, magicVMDK):
		return None, VMDK
	case bytes.HasPrefix(head, magicVMDKDesc):
		return None, VMDKDescriptor
	case bytes.HasPrefix(head, magicVHDX):
		return None, VHDX
	case bytes.HasPrefix(head, magicVHD):
		return None, VHD
	case len(head) >= vdiSignatureOff+4 &&
		binary.LittleEndian.Uint32(head[vdiSignatureOff:]) == vdiSignature:
		return None, VDI
	case len(head) >= isoMagicOff+len(magicISO) &&
		bytes.Equal(head[isoMagicOff:isoMagicOff+len(magicISO)], magicISO):
		return None, ISO
	}
	return None, Raw
}
