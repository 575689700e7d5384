package format

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

func TestCheckStructureDispatchesByFormat(t *testing.T) {
	junk := bytes.Repeat([]byte{0xEE}, 4096)
	for _, f := range []Format{Raw, ISO} {
		assert.NoError(t, CheckStructure(f, bytes.NewReader(junk), int64(len(junk))), f)
	}
	for _, f := range []Format{QCOW2, VDI, VHD, VHDX, VMDK} {
		assert.ErrorIs(t, CheckStructure(f, bytes.NewReader(junk), int64(len(junk))), errdefs.ErrInvalidImage, f)
	}
}

// TestStructureChecksAcceptRealImages: dynamic VHDs, VDIs and VHDXs made
// by Virtual PC, Hyper-V, Disk2VHD, VirtualBox and qemu pass our checks.
func TestStructureChecksAcceptRealImages(t *testing.T) {
	for rel, check := range map[string]func(r *bytes.Reader, n int64) error{
		"qemu/hyperv2012r2-dynamic.vhd": func(r *bytes.Reader, n int64) error { return CheckVHD(r, n) },
		"qemu/virtualpc-dynamic.vhd":    func(r *bytes.Reader, n int64) error { return CheckVHD(r, n) },
		"qemu/d2v-zerofilled.vhd":       func(r *bytes.Reader, n int64) error { return CheckVHD(r, n) },
		"dissect/dynamic.vhd":           func(r *bytes.Reader, n int64) error { return CheckVHD(r, n) },
		"slx/image-default.vdi":         func(r *bytes.Reader, n int64) error { return CheckVDI(r, n) },
		"qemu/iotest-dynamic-1G.vhdx":   func(r *bytes.Reader, n int64) error { return CheckVHDX(r, n) },
		"qemu/test-disk2vhd.vhdx":       func(r *bytes.Reader, n int64) error { return CheckVHDX(r, n) },
		"dissect/dynamic.vhdx":          func(r *bytes.Reader, n int64) error { return CheckVHDX(r, n) },
		"dissect/fixed.vhdx":            func(r *bytes.Reader, n int64) error { return CheckVHDX(r, n) },
	} {
		t.Run(rel, func(t *testing.T) {
			b := testimg.SharedImageBytes(t, rel)
			require.NoError(t, check(bytes.NewReader(b), int64(len(b))))
		})
	}
}

// TestTruncatedVHDAndVDIRefused cuts qemu-made images inside their last
// data block, where qemu-img itself converts them "successfully" with
// zeros (VHD: the last 511 bytes, which qemu rounds up to a sector; VDI:
// anywhere), and checks ours refuses each cut.
func TestTruncatedVHDAndVDIRefused(t *testing.T) {
	needTool(t, "qemu-img")
	dir, raw := variedRaw(t, 6<<20, 9)
	for _, tc := range []struct {
		qfmt  string
		check func(r *bytes.Reader, n int64) error
		cuts  func(n int) []int
	}{
		{"vpc", func(r *bytes.Reader, n int64) error { return CheckVHD(r, n) },
			func(n int) []int { return []int{n - 512 - 1, n - 512 - 88, n - 512 - 511, n - 4096, n / 2} }},
		{"vdi", func(r *bytes.Reader, n int64) error { return CheckVDI(r, n) },
			func(n int) []int { return []int{n - 1, n - 4096, n / 2, 0x300} }},
	} {
		t.Run(tc.qfmt, func(t *testing.T) {
			p := filepath.Join(dir, "disk."+tc.qfmt)
			run(t, "qemu-img", "convert", "-f", "raw", "-O", tc.qfmt, raw, p)
			full := filepath.Join(dir, tc.qfmt+".raw")
			run(t, "qemu-img", "convert", "-f", tc.qfmt, "-O", "raw", p, full)
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			require.NoError(t, tc.check(bytes.NewReader(b), int64(len(b))))
			for i, cut := range tc.cuts(len(b)) {
				err := tc.check(bytes.NewReader(b[:cut]), int64(cut))
				require.ErrorIs(t, err, errdefs.ErrInvalidImage, "cut at %d of %d", cut, len(b))
				assert.Contains(t, err.Error(), "past the end", "cut at %d", cut)
				if i == 0 {
					// The hole this closes: qemu-img converts the cut file
					// without an error, and the disk differs.
					c := filepath.Join(dir, "cut."+tc.qfmt)
					require.NoError(t, os.WriteFile(c, b[:cut], 0o644))
					out := filepath.Join(dir, "cut.raw")
					if err := exec.Command("qemu-img", "convert", "-f", tc.qfmt, "-O", "raw", c, out).Run(); err == nil {
						assert.NotEqual(t, fileSHA(t, full), fileSHA(t, out), "qemu-img lost data silently")
					}
				}
			}
		})
	}
}

func fileSHA(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return sha(b)
}

// rewriteRegionTable edits both region tables of b and fixes their
// checksums, so only the edit is wrong.
func rewriteRegionTable(b []byte, edit func(table []byte)) []byte {
	b = append([]byte(nil), b...)
	for _, off := range []int{VHDXRegionTable1, VHDXRegionTable2} {
		tbl := b[off : off+VHDXRegionTableLen]
		edit(tbl)
		clear(tbl[4:8])
		binary.LittleEndian.PutUint32(tbl[4:], crc32.Checksum(tbl, crc32.MakeTable(crc32.Castagnoli)))
	}
	return b
}

func TestCheckVHDXRefusals(t *testing.T) {
	needTool(t, "qemu-img")
	dir, raw := variedRaw(t, 4<<20, 5)
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
	bad[VHDXRegionTable1+20] ^= 0xff
	bad[VHDXRegionTable2+20] ^= 0xff
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
	one[VHDXRegionTable1+20] ^= 0xff
	assert.NoError(t, CheckVHDX(bytes.NewReader(one), int64(len(one))))
}

func TestCheckVHDXDifferencingRefused(t *testing.T) {
	b := testimg.SharedImageBytes(t, "dissect/differencing.avhdx")
	err := CheckVHDX(bytes.NewReader(b), int64(len(b)))
	require.ErrorIs(t, err, errdefs.ErrUnsafeImage)
	assert.Contains(t, err.Error(), "differencing disk refers to a parent image")
}
