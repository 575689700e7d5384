package format

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The GUIDs written in their text form are stored with their first three
// fields little endian: the bytes a qemu-made VHDX holds.
func TestVHDXGUIDsAsStored(t *testing.T) {
	assert.Equal(t, [16]byte{0x66, 0x77, 0xc2, 0x2d, 0x23, 0xf6, 0x00, 0x42, 0x9d, 0x64, 0x11, 0x5e, 0x9b, 0xfd, 0x4a, 0x08}, VHDXBATRegion)
	assert.Equal(t, [16]byte{0x06, 0xa2, 0x7c, 0x8b, 0x90, 0x47, 0x9a, 0x4b, 0xb8, 0xfe, 0x57, 0x5f, 0x05, 0x0f, 0x88, 0x6e}, VHDXMetadataRegion)
	assert.Equal(t, [16]byte{0x37, 0x67, 0xa1, 0xca, 0x36, 0xfa, 0x43, 0x4d, 0xb3, 0xb6, 0x33, 0xf0, 0xaa, 0x44, 0xe7, 0x6b}, VHDXFileParameters)
}

// VHDXIntact checks the signature and the CRC-32C over the block with its
// checksum field zeroed, and leaves the block as it was.
func TestVHDXIntactChecksSignatureAndCRC(t *testing.T) {
	b := make([]byte, VHDXHeaderLen)
	copy(b, "head")
	b[100] = 7
	got, _ := vhdxChecksum(b)
	binary.LittleEndian.PutUint32(b[4:], got)
	before := string(b)
	assert.True(t, VHDXIntact(b, "head"))
	assert.Equal(t, before, string(b), "the block is not changed")
	assert.False(t, VHDXIntact(b, "regi"), "another signature")
	b[100]++
	assert.False(t, VHDXIntact(b, "head"), "a changed byte")
}
