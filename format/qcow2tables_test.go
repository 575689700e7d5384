package format

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
)

// One L2 entry decoded as every reader sees it: the file bytes its guest
// cluster reads, and the refusals, for standard and extended entries.
func TestQCOW2L2EntryDecodesEveryKind(t *testing.T) {
	v3 := Header{ClusterBits: 16, QCOW2Version: 3}
	v2 := Header{ClusterBits: 16, QCOW2Version: 2}
	el2 := Header{ClusterBits: 16, QCOW2Version: 3, ExtendedL2: true}
	entry := func(e, bitmap uint64) []byte {
		b := make([]byte, 16)
		binary.BigEndian.PutUint64(b, e)
		binary.BigEndian.PutUint64(b[8:], bitmap)
		return b
	}
	// Compressed, 64 KiB clusters: host offset in bits 0..53, additional
	// sectors from bit 54.
	compressed := QCOW2EntryCompressed | 2<<54 | 0x30100
	for _, c := range []struct {
		name    string
		h       Header
		e, bm   uint64
		off, n  uint64
		refused string
	}{
		{"unallocated", v3, 0, 0, 0, 0, ""},
		{"data", v3, QCOW2EntryCopied | 0x50000, 0, 0x50000, 64 << 10, ""},
		{"zero flag", v3, 0x50000 | QCOW2EntryZero, 0, 0, 0, ""},
		{"compressed", v3, compressed, 0, 0x30000, 3 * 512, ""},
		{"subclusters up to the last allocated", el2, 0x50000, 0b1011, 0x50000, 4 * 2048, ""},
		{"no subcluster allocated", el2, 0x50000, 0xffff << 32, 0, 0, ""},
		{"zero flag in a version 2 image", v2, 0x50000 | QCOW2EntryZero, 0, 0, 0, "zero flag in a version 2"},
		{"reserved bits", v3, 0x50000 | 1<<3, 0, 0, 0, "reserved bits"},
		{"not aligned", v3, 0x50200, 0, 0, 0, "not cluster aligned"},
		{"compressed and copied", v3, compressed | QCOW2EntryCopied, 0, 0, 0, "copied flag"},
		{"compressed with a bitmap", el2, compressed, 1, 0, 0, "subcluster bitmap"},
		{"allocated and zero", el2, 0x50000, 1 | 1<<32, 0, 0, "both allocated and zero"},
		{"allocated in nothing", el2, 0, 1, 0, 0, "allocated in an unallocated cluster"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := QCOW2L2Entry(c.h, 7, entry(c.e, c.bm))
			if c.refused != "" {
				require.ErrorIs(t, err, errdefs.ErrInvalidImage)
				assert.ErrorContains(t, err, "cluster 7")
				assert.ErrorContains(t, err, c.refused)
				return
			}
			require.NoError(t, err)
			off, n := got.FileBytes(c.h)
			assert.Equal(t, c.off, off, "offset")
			assert.Equal(t, c.n, n, "length")
		})
	}
}
