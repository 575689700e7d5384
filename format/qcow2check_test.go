package format

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
)

func TestCheckQCOW2(t *testing.T) {
	needTool(t, "qemu-img")
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	writeRaw(t, raw, variedContent(6<<20, 3))
	for _, tc := range []struct {
		name string
		opts []string
		comp bool
	}{
		{"plain", nil, false},
		{"v2", []string{"compat=0.10"}, false},
		{"c4k", []string{"cluster_size=4096"}, false},
		{"el2", []string{"extended_l2=on"}, false},
		{"compressed", nil, true},
		{"compressed-zstd", []string{"compression_type=zstd"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+".qcow2")
			args := []string{"convert", "-f", "raw", "-O", "qcow2"}
			if tc.comp {
				args = append(args, "-c")
			}
			for _, o := range tc.opts {
				args = append(args, "-o", o)
			}
			run(t, "qemu-img", append(args, raw, p)...)
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			require.NoError(t, CheckQCOW2(bytes.NewReader(b), int64(len(b))))

			// Cut in the middle and just before the end: the last data
			// clusters (random data is written at the end of the disk)
			// are referenced but missing. qemu-img would read zeros.
			for _, cut := range []int{len(b) / 2, len(b) - 4096, len(b) - 1024} {
				err := CheckQCOW2(bytes.NewReader(b[:cut]), int64(cut))
				require.ErrorIs(t, err, errdefs.ErrInvalidImage, "cut at %d of %d", cut, len(b))
				require.ErrorContains(t, err, "past the end")
			}
			// Cut inside the header.
			err = CheckQCOW2(bytes.NewReader(b[:60]), 60)
			require.ErrorIs(t, err, errdefs.ErrInvalidImage)
		})
	}
}

// TestCheckQCOW2QemuIoWrites checks images qemu itself grew by small
// guest writes (not just qemu-img convert output) pass.
func TestCheckQCOW2QemuIoWrites(t *testing.T) {
	needTool(t, "qemu-img")
	needTool(t, "qemu-io")
	dir := t.TempDir()
	p := filepath.Join(dir, "w.qcow2")
	run(t, "qemu-img", "create", "-f", "qcow2", p, "64M")
	run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0xab 0 4k", "-c", "write -P 0xcd 63M 512", "-c", "write -z 1M 64k", "-c", "write -P 1 33M 3k", p)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, CheckQCOW2(bytes.NewReader(b), int64(len(b))))
	empty := filepath.Join(dir, "e.qcow2")
	run(t, "qemu-img", "create", "-f", "qcow2", empty, "10G")
	b, err = os.ReadFile(empty)
	require.NoError(t, err)
	require.NoError(t, CheckQCOW2(bytes.NewReader(b), int64(len(b))))
}

func TestCheckQCOW2Malformed(t *testing.T) {
	needTool(t, "qemu-img")
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	writeRaw(t, raw, variedContent(1<<20, 4))
	p := convert(t, raw, dir, "d.qcow2", "qcow2")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	h, err := ParseHeader(QCOW2, b)
	require.NoError(t, err)
	// Set a reserved bit in the first L1 entry.
	bad := append([]byte(nil), b...)
	bad[h.L1TableOffset+7] |= 0x02
	require.ErrorIs(t, CheckQCOW2(bytes.NewReader(bad), int64(len(bad))), errdefs.ErrInvalidImage)
	// Point the first L1 entry past the end of the file.
	bad = append([]byte(nil), b...)
	bad[h.L1TableOffset+3] = 0x7f
	err = CheckQCOW2(bytes.NewReader(bad), int64(len(bad)))
	require.ErrorIs(t, err, errdefs.ErrInvalidImage)
	require.ErrorContains(t, err, "L2 table 0")
}
