package importer_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/hostileimg"
	"github.com/diskimport/engine/internal/testimg"
)

// lateL2QCOW2 writes a 16 MiB-disk qcow2 whose L2 table comes after its
// data clusters and filler bytes of no table, compressed with zstd; it
// returns the image and the disk's digest.
func lateL2QCOW2(t *testing.T, dir string, filler int64) (string, string) {
	const vsize = 16 << 20
	disk := make([]byte, vsize)
	clusters := make([][]byte, vsize>>16)
	for i := 0; i < len(clusters); i += 3 {
		c := disk[i<<16 : (i+1)<<16]
		for k := range c {
			c[k] = byte(k%251 + i + 1)
		}
		clusters[i] = c
	}
	raw := filepath.Join(dir, "disk.raw")
	require.NoError(t, os.WriteFile(raw, disk, 0o644))
	img := filepath.Join(dir, "late.qcow2")
	f, err := os.Create(img)
	require.NoError(t, err)
	_, err = hostileimg.QCOW2{VirtualSize: vsize, Clusters: clusters, Filler: filler, L2AfterFiller: true}.WriteTo(f)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return testimg.Compress(t, img, "zst"), testimg.Digest(t, raw, -1)
}

// TestStreamDecodeSpillLimit: the decoder's spill never exceeds the
// image's virtual size, nor Options.MaxSpill. 32 MiB of filler before
// the L2 table of a 16 MiB disk, arriving from stdin, fails once 16 MiB
// are spilled, saying why (the decoder spilled all of it); a legitimate
// late L2 table within the cap imports, and fails past a smaller cap. The
// same filler image over HTTP, which can be read again, is imported
// through scratch and qemu-img.
func TestStreamDecodeSpillLimit(t *testing.T) {
	testimg.Need(t, "zstd", "qemu-img")
	dir := t.TempDir()
	filler, fillerWant := lateL2QCOW2(t, t.TempDir(), 32<<20)
	late, lateWant := lateL2QCOW2(t, dir, 0)
	run := func(t *testing.T, src string, maxSpill int64) (*importer.Result, error, string) {
		o := importer.Options{Source: "-", SourceReader: pipeOf(t, src), TargetOptions: importer.TargetOptions{
			ScratchDir: t.TempDir(),
			MaxSpill:   maxSpill,
		},
			Target: filepath.Join(t.TempDir(), "disk.img"), Logger: testLogger(t)}
		res, err := importer.Import(context.Background(), importer.WithStreamDecodeBuffer(o, spillBound))
		assertEmptyDir(t, o.ScratchDir)
		return res, err, o.Target
	}
	t.Run("filler-from-stdin", func(t *testing.T) {
		res, err, _ := run(t, filler, 0)
		require.Error(t, err)
		assert.ErrorIs(t, err, errdefs.ErrNotStreamable)
		assert.Contains(t, err.Error(), "virtual size, 16777216 bytes")
		assert.LessOrEqual(t, res.ScratchBytes, int64(16<<20))
		assert.False(t, res.Complete)
	})
	t.Run("late-l2-within-the-disk", func(t *testing.T) {
		res, err, target := run(t, late, 0)
		require.NoError(t, err)
		assert.True(t, res.ScratchUsed)
		assert.Equal(t, lateWant, testimg.Digest(t, target, -1))
	})
	t.Run("late-l2-past-the-cap", func(t *testing.T) {
		_, err, _ := run(t, late, 2<<20)
		require.Error(t, err)
		assert.ErrorIs(t, err, errdefs.ErrNotStreamable)
		assert.Contains(t, err.Error(), "configured spill limit")
	})
	t.Run("filler-over-http", func(t *testing.T) {
		base := testimg.Serve(t, filepath.Dir(filler))
		o := importer.Options{Source: base + filepath.Base(filler), TargetOptions: importer.TargetOptions{
			ScratchDir: t.TempDir(),
		},
			Target: filepath.Join(t.TempDir(), "disk.img"), Logger: testLogger(t)}
		res, err := importer.Import(context.Background(), importer.WithStreamDecodeBuffer(o, spillBound))
		require.NoError(t, err)
		assert.Contains(t, res.Phases, importer.PhaseTransferScratch, "not imported through scratch")
		assert.Equal(t, fillerWant, testimg.Digest(t, o.Target, -1))
		assertEmptyDir(t, o.ScratchDir)
	})
	t.Run("negative-cap", func(t *testing.T) {
		_, err := importer.Import(context.Background(), importer.Options{Source: late, Target: filepath.Join(t.TempDir(), "d.img"), TargetOptions: importer.TargetOptions{MaxSpill: -1}})
		assert.ErrorIs(t, err, importer.ErrInvalidOptions)
	})
}
