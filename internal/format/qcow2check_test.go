package format

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

func TestCheckQCOW2(t *testing.T) {
	needTool(t, "qemu-img")
	dir, raw := variedRaw(t, 6<<20, 3)
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
	dir, raw := variedRaw(t, 1<<20, 4)
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

// qcow2FileHeader parses the header of the qcow2 at path.
func qcow2FileHeader(t *testing.T, path string) Header {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	h, err := ParseHeader(QCOW2, b[:min(len(b), 64<<10)])
	require.NoError(t, err)
	return h
}

// readLayout reads the layout of the qcow2 at path, cut to size bytes.
func readLayout(t *testing.T, path string, size, maxTableBytes int64) (QCOW2Layout, error) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	return ReadQCOW2Layout(context.Background(), f, qcow2FileHeader(t, path), size, maxTableBytes)
}

// A plain qcow2 qemu-img wrote references about its whole file, none of
// it before its tables; tables past the bound are not read; tables
// outside the file are refused, not read past the end.
func TestReadQCOW2Layout(t *testing.T) {
	needTool(t, "qemu-img")
	dir, raw := variedRaw(t, 24<<20, 4)
	plain := filepath.Join(dir, "plain.qcow2")
	run(t, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, plain)
	st, err := os.Stat(plain)
	require.NoError(t, err)
	lay, err := readLayout(t, plain, st.Size(), 16<<20)
	require.NoError(t, err)
	assert.InDelta(t, st.Size(), lay.Referenced, float64(st.Size())/10, "layout %+v", lay)
	assert.Zero(t, lay.Early)
	assert.Zero(t, lay.Compressed)
	assert.Equal(t, 1, lay.L2Tables)
	assert.Positive(t, lay.Clusters)

	_, err = readLayout(t, plain, st.Size(), 4<<10)
	assert.ErrorIs(t, err, errdefs.ErrTablesTooLarge, "one 64 KiB L2 table past a 4 KiB bound")

	// Growing the disk moves the L1 table to the end of the file; cut
	// just past its start.
	moved := filepath.Join(dir, "moved.qcow2")
	run(t, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, moved)
	run(t, "qemu-img", "resize", "-q", "-f", "qcow2", moved, "2G")
	h := qcow2FileHeader(t, moved)
	require.NoError(t, os.Truncate(moved, int64(h.L1TableOffset)+4))
	_, err = readLayout(t, moved, int64(h.L1TableOffset)+4, 16<<20)
	require.Error(t, err)
	assert.ErrorIs(t, err, errdefs.ErrInvalidImage)
}

// TestCheckQCOW2SubclusterSamples: real extended-L2 images that qemu-img
// check accepts pass our check too.
func TestCheckQCOW2SubclusterSamples(t *testing.T) {
	for _, cs := range []string{"16384", "65536"} {
		for _, cp := range []string{"off", "on"} {
			for _, l2 := range []string{"off", "on"} {
				name := fmt.Sprintf("slx/image_cs-%s_cp-%s_l2-%s.qcow2", cs, cp, l2)
				t.Run(name, func(t *testing.T) {
					b := testimg.SharedImageBytes(t, name)
					h, err := ParseHeader(QCOW2, b[:min(len(b), DefaultPeekSize)])
					require.NoError(t, err)
					assert.Equal(t, l2 == "on", h.ExtendedL2)
					require.NoError(t, CheckQCOW2(bytes.NewReader(b), int64(len(b))))
				})
			}
		}
	}
}

// TestCheckQCOW2PartialClusters builds extended-L2 images whose last
// cluster holds only its first subclusters (as qemu writes them) and cuts
// them inside the last allocated subcluster.
func TestCheckQCOW2PartialClusters(t *testing.T) {
	needTool(t, "qemu-img")
	needTool(t, "qemu-io")
	for _, tc := range []struct {
		clusterSize int
		writes      []string // qemu-io commands
	}{
		{64 << 10, []string{"write -P 0xab 0 2k", "write -P 0xcd 1M 6k"}},
		{16 << 10, []string{"write -P 0x11 3M 512", "write -P 0x22 5M 1536"}},
		{2 << 20, []string{"write -P 0x33 4M 64k", "write -P 0x44 8M 200k"}},
	} {
		t.Run(fmt.Sprintf("cs-%d", tc.clusterSize), func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "el2.qcow2")
			run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-o", fmt.Sprintf("extended_l2=on,cluster_size=%d", tc.clusterSize), p, "16M")
			for _, w := range tc.writes {
				run(t, "qemu-io", "-f", "qcow2", "-c", w, p)
			}
			out := run(t, "qemu-img", "check", "-f", "qcow2", p)
			require.Contains(t, string(out), "No errors")
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			require.NotZero(t, len(b)%tc.clusterSize, "the last cluster should be partial for this test to mean anything")
			require.NoError(t, CheckQCOW2(bytes.NewReader(b), int64(len(b))))

			// Cut inside the last allocated subcluster: refused.
			for _, cut := range []int{len(b) - 1, len(b) - 256} {
				err := CheckQCOW2(bytes.NewReader(b[:cut]), int64(cut))
				require.ErrorIs(t, err, errdefs.ErrInvalidImage, "cut at %d of %d", cut, len(b))
				assert.True(t, strings.Contains(err.Error(), "allocated subcluster"), err.Error())
			}
		})
	}
}
