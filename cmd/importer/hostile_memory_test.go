package main

import (
	"os"
	"os/exec"
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
// in tables ahead of them, and a 1 MB .xz dynamic VHD whose block table
// names 3.3 million blocks. None may be OOM-killed or let memory.peak
// near the limit.
func TestHostileImagesInSmallMemoryCgroup(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the importer and decodes images of 13 and 60 MiB")
	}
	testimg.Need(t, "xz")
	dir := t.TempDir()
	srv := filepath.Join(dir, "srv")
	require.NoError(t, os.Mkdir(srv, 0o755))
	images := map[string]string{
		"vmdk": testimg.Compress(t, writeHostile(t, srv, "ahead.vmdk", func(f *os.File) error {
			return hostileimg.VMDKTablesAhead(f, 30000)
		}), "xz"),
		"vhd": testimg.Compress(t, writeHostile(t, srv, "blocks.vhd", func(f *os.File) error {
			return hostileimg.VHDManyBlocks(f, 1<<30, 64<<20/20)
		}), "xz"),
	}
	for k, p := range images {
		st, err := os.Stat(p)
		require.NoError(t, err)
		t.Logf("%s: %s of %d bytes", k, filepath.Base(p), st.Size())
	}
	bin := filepath.Join(dir, "importer")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(out))
	plain := serveWithoutRanges(t, srv)

	for _, c := range []struct {
		name, image string
		stdin       bool
		reason      string // "" for success
	}{
		{"vmdk.xz grain tables ahead of 15 million grains", "vmdk", false, "InvalidImage"},
		{"vhd.xz block table of 3.3 million blocks", "vhd", false, "InvalidImage"},
	} {
		t.Run(c.name, func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "out.img")
			scratch := t.TempDir()
			cg := newMemCgroup(t, memLimit)
			src := plain + filepath.Base(images[c.image])
			var stdin *os.File
			if c.stdin {
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
			require.Error(t, err, "the import succeeded")
			assert.Equal(t, c.reason, res["reason"])
		})
	}
}
