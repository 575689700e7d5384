package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/hostileimg"
	"github.com/diskimport/engine/internal/testimg"
)

// writeHostile writes an image made by write to dir/name.
func writeHostile(t *testing.T, dir, name string, write func(f *os.File) error) string {
	t.Helper()
	p := filepath.Join(dir, name)
	f, err := os.Create(p)
	require.NoError(t, err)
	require.NoError(t, write(f))
	require.NoError(t, f.Close())
	return p
}

// TestHostileImagesInSmallMemoryCgroup imports, inside a 256 MiB memory
// cgroup, images made to cost a stream decoder far more than their size
// (issue 21): a 2 MB .xz streamOptimized vmdk naming 15 million grains
// in tables ahead of them, a 1 MB .xz dynamic VHD whose block table
// names 3.3 million blocks, and a 16 MiB-disk qcow2 .zst of 14 KB with
// 256 MiB of bytes no table refers to before its refcount table (a
// decoder keeping bytes while any table is to come spills them all), or
// before its L2 table (which may claim them, so they are held, but not
// past the disk's size). None may be OOM-killed or let memory.peak near
// the limit; the unreferenced filler must not be spilled at all, and the
// filler before the L2 table not past the disk's size, the import of
// that one-time stream failing instead.
func TestHostileImagesInSmallMemoryCgroup(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the importer and decodes images of 60 to 270 MiB")
	}
	testimg.Need(t, "xz", "zstd")
	dir := t.TempDir()
	srv := filepath.Join(dir, "srv")
	require.NoError(t, os.Mkdir(srv, 0o755))
	const vsize = 16 << 20
	disk := make([]byte, vsize)
	clusters := make([][]byte, vsize/(64<<10))
	for i := 0; i < len(clusters); i += 3 {
		c := disk[i<<16 : (i+1)<<16]
		for k := range c {
			c[k] = byte(k%253 + i + 1)
		}
		clusters[i] = c
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "disk.raw"), disk, 0o644))
	want := testimg.Digest(t, filepath.Join(dir, "disk.raw"), -1)
	qcow2 := func(name string, l2After bool) string {
		return writeHostile(t, srv, name, func(f *os.File) error {
			_, err := hostileimg.QCOW2{VirtualSize: vsize, Clusters: clusters, Filler: 256 << 20, L2AfterFiller: l2After}.WriteTo(f)
			return err
		})
	}
	images := map[string]string{
		"vmdk": testimg.Compress(t, writeHostile(t, srv, "ahead.vmdk", func(f *os.File) error {
			return hostileimg.VMDKTablesAhead(f, 30000)
		}), "xz"),
		"vhd": testimg.Compress(t, writeHostile(t, srv, "blocks.vhd", func(f *os.File) error {
			return hostileimg.VHDManyBlocks(f, 1<<30, 64<<20/20)
		}), "xz"),
		"filler":  testimg.Compress(t, qcow2("filler.qcow2", false), "zst"),
		"late-l2": testimg.Compress(t, qcow2("late.qcow2", true), "zst"),
	}
	for k, p := range images {
		st, err := os.Stat(p)
		require.NoError(t, err)
		t.Logf("%s: %s of %d bytes", k, filepath.Base(p), st.Size())
	}
	bin := buildImporter(t, dir)
	plain := serveWithoutRanges(t, srv)

	for _, c := range []struct {
		name, image string
		stdin       bool
		reason      string // "" for success
	}{
		{"vmdk.xz grain tables ahead of 15 million grains", "vmdk", false, "InvalidImage"},
		{"vhd.xz block table of 3.3 million blocks", "vhd", false, "InvalidImage"},
		{"qcow2.zst 256 MiB no table refers to", "filler", false, ""},
		{"qcow2.zst 256 MiB before its L2 table from stdin", "late-l2", true, "Failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "out.img")
			scratch := t.TempDir()
			cg := newMemCgroup(t, memLimit)
			src := plain + filepath.Base(images[c.image])
			var stdin *os.File
			if c.stdin {
				var err error
				stdin, err = os.Open(images[c.image])
				require.NoError(t, err)
				defer stdin.Close()
				src = "-"
			}
			t0 := time.Now()
			out, _, err := cg.runStdin(stdin, bin, "-q", "--json", "--scratch", scratch, src, target)
			peak := cg.peak(t)
			t.Logf("cgroup peak %d MiB of %d MiB, %d processes OOM-killed", peak>>20, memLimit>>20, cg.oomKills(t))
			require.Zero(t, cg.oomKills(t))
			res := resultJSON(t, out)
			t.Logf("%s in %v: scratch used %v (%v bytes): %s",
				c.name, time.Since(t0).Round(time.Millisecond), res["scratchUsed"], res["scratchBytes"], res["message"])
			assert.Less(t, peak, int64(peakMost))
			if c.reason == "" {
				require.NoError(t, err, string(out))
				assert.Equal(t, false, res["scratchUsed"], "bytes no table refers to were spilled")
				assert.Equal(t, want, testimg.Digest(t, target, vsize))
				return
			}
			require.Error(t, err, "the import succeeded")
			assert.Equal(t, c.reason, res["reason"])
			if n, ok := res["scratchBytes"].(float64); ok {
				assert.LessOrEqual(t, n, float64(vsize), "spilled more than the disk's size")
			}
		})
	}
}
