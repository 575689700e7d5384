package format

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testimg"
)

// rewriteRegionTable edits both region tables of b and fixes their
// checksums, so only the edit is wrong.
func rewriteRegionTable(b []byte, edit func(table []byte)) []byte {
	b = append([]byte(nil), b...)
	for _, off := range []int{vhdxRegionTable1, vhdxRegionTable2} {
		tbl := b[off : off+vhdxRegionTableLen]
		edit(tbl)
		clear(tbl[4:8])
		binary.LittleEndian.PutUint32(tbl[4:], crc32.Checksum(tbl, crc32.MakeTable(crc32.Castagnoli)))
	}
	return b
}

func TestCheckVHDXRefusals(t *testing.T) {
	needTool(t, "qemu-img")
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	writeRaw(t, raw, variedContent(4<<20, 5))
	p := convert(t, raw, dir, "disk.vhdx", "vhdx")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, CheckVHDX(bytes.NewReader(b), int64(len(b))))

	cases := map[string]struct {
		img  []byte
		want error
		msg  string
	}{
		"too many regions": {rewriteRegionTable(b, func(tb []byte) { binary.LittleEndian.PutUint32(tb[8:], 2048) }), errdefs.ErrUnsafeImage, "more than 2047"},
		"bad signature":    {rewriteRegionTable(b, func(tb []byte) { copy(tb, "regX") }), errdefs.ErrInvalidImage, "signature"},
		"region past end": {rewriteRegionTable(b, func(tb []byte) {
			binary.LittleEndian.PutUint64(tb[vhdxRegionHeaderLen+16:], 1<<40)
		}), errdefs.ErrInvalidImage, "past the end"},
		"truncated before tables": {b[:200<<10], errdefs.ErrInvalidImage, "region tables"},
	}
	bad := append([]byte(nil), b...)
	bad[vhdxRegionTable1+20] ^= 0xff
	bad[vhdxRegionTable2+20] ^= 0xff
	cases["bad checksum"] = struct {
		img  []byte
		want error
		msg  string
	}{bad, errdefs.ErrInvalidImage, "checksum"}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := CheckVHDX(bytes.NewReader(tc.img), int64(len(tc.img)))
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	// One damaged copy is fine while the other is good, as for qemu.
	one := append([]byte(nil), b...)
	one[vhdxRegionTable1+20] ^= 0xff
	assert.NoError(t, CheckVHDX(bytes.NewReader(one), int64(len(one))))
}

func TestCheckVHDXDifferencingRefused(t *testing.T) {
	b := testimg.SharedImageBytes(t, "dissect/differencing.avhdx")
	err := CheckVHDX(bytes.NewReader(b), int64(len(b)))
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
	assert.Contains(t, err.Error(), "differencing disk refers to a parent image")
}
