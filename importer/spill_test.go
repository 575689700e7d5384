package importer_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cdi"
	"github.com/diskimport/engine/internal/hostileimg"
	"github.com/diskimport/engine/internal/testimg"
)

// The stream decoder's spill: clusters that arrive before their tables go
// to the scratch directory past the decoder's memory bound, and only then
// is scratch used.

const spillBound = 1 << 20

// TestStreamDecodeSpills: with a 1 MiB bound, a qcow2 whose tables come
// late is decoded in one pass over HTTP and from stdin; what was spilled is
// reported and gone afterwards.
func TestStreamDecodeSpills(t *testing.T) {
	url, gz, want, loop := servedLateTables(t)
	for _, srcName := range []string{"http", "stdin", "stdin-block"} {
		t.Run(srcName, func(t *testing.T) {
			block := strings.HasSuffix(srcName, "-block")
			if block && loop == "" {
				t.Skip("loop devices need root")
			}
			var logs bytes.Buffer
			o := importer.Options{Source: url, TargetOptions: importer.TargetOptions{
				ScratchDir: t.TempDir(),
			}, Logger: logTo(t, &logs),
				Target: filepath.Join(t.TempDir(), "disk.img")}
			if block {
				o.Target = loop
			}
			if strings.HasPrefix(srcName, "stdin") {
				o.Source, o.SourceReader = "-", pipeOf(t, gz)
			}
			res, err := importer.Import(context.Background(), importer.WithStreamDecodeBuffer(o, spillBound))
			if err != nil {
				t.Log(logs.String())
			}
			require.NoError(t, err)
			assert.Equal(t, streamDecodePhases, res.Phases)
			assert.True(t, res.ScratchUsed)
			assert.Greater(t, res.ScratchBytes, int64(spillBound), "the late table's data went to the spill file")
			assert.Contains(t, logs.String(), "spilled to the scratch directory")
			expectImage(t, want, o.Target, block)
			assertEmptyDir(t, o.ScratchDir)
		})
	}
}

// pipeOf feeds path through an os.Pipe, as stdin would be.
func pipeOf(t *testing.T, path string) *os.File {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	go func() {
		_, _ = w.Write(data)
		w.Close()
	}()
	t.Cleanup(func() { r.Close() })
	return r
}

// TestStreamDecodeOverflowWithoutScratch: without a usable scratch
// directory, an HTTP source is started over on the scratch route (which
// reports that scratch is required), and a one-time
// stream fails at once with ErrScratchSpaceRequired naming the source and
// the bytes; neither leaves anything on the target.
func TestStreamDecodeOverflowWithoutScratch(t *testing.T) {
	url, gz, _, loop := servedLateTables(t)
	for _, srcName := range []string{"http", "stdin", "stdin-block", "http-block"} {
		t.Run(srcName, func(t *testing.T) {
			block := strings.HasSuffix(srcName, "-block")
			if block && loop == "" {
				t.Skip("loop devices need root")
			}
			srcName = strings.TrimSuffix(srcName, "-block")
			var logs bytes.Buffer
			o := importer.Options{Source: url, TargetOptions: importer.TargetOptions{
				ScratchDir: filepath.Join(t.TempDir(), "none"),
			}, Logger: logTo(t, &logs),
				Target: filepath.Join(t.TempDir(), "disk.img")}
			if block {
				o.Target = loop
			}
			if srcName == "stdin" {
				o.Source, o.SourceReader = "-", pipeOf(t, gz)
			}
			res, err := importer.Import(context.Background(), importer.WithStreamDecodeBuffer(o, spillBound))
			t.Log(err)
			require.ErrorIs(t, err, errdefs.ErrScratchSpaceRequired)
			assert.False(t, res.Complete)
			// CDI's handshake: the controller adds a scratch volume.
			m := cdi.NewTerminationMessage(res, err)
			assert.True(t, m.ScratchSpaceRequired)
			assert.Equal(t, cdi.ExitOK, cdi.ExitCode(err))
			if srcName == "http" {
				assert.Contains(t, logs.String(), "cannot be decoded in one pass; starting the import over")
				assert.Contains(t, res.Phases, importer.PhaseTransferScratch)
			} else {
				assert.Equal(t, []importer.Phase{importer.PhaseInfo, importer.PhaseTransferDataFile, importer.PhaseError}, res.Phases)
				assert.Contains(t, err.Error(), "from standard input")
				assert.Contains(t, err.Error(), "bytes of scratch space")
			}
			if block {
				// The decoder held the device's head: it still
				// holds what was there before.
				assertPattern(t, loop, 0, 1<<20)
			} else {
				assertEmptyDir(t, filepath.Dir(o.Target))
			}
		})
	}
}

// TestStreamDecodeSnapshots: a qcow2 with internal snapshots, written to
// before and after them, is decoded as a stream (the active layer only),
// from HTTP and from stdin, with and without a spill; its bytes are
// qemu-img's.
func TestStreamDecodeSnapshots(t *testing.T) {
	testimg.Need(t, "qemu-img", "qemu-io", "gzip")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "snap.raw", imageSize, 48)
	img := testimg.Convert(t, raw, filepath.Join(dir, "snap.qcow2"), "qcow2")
	testimg.Run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x31 512k 64k", img)
	testimg.Run(t, "qemu-img", "snapshot", "-c", "s1", img)
	testimg.Run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x32 1M 128k", "-c", "write -z 2M 64k", img)
	testimg.Run(t, "qemu-img", "snapshot", "-c", "s2", img)
	testimg.Run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x33 5M 64k", img)
	want := qemuRaw(t, img, "qcow2")
	gz := testimg.Compress(t, img, "gz")
	base := testimg.Serve(t, dir)
	for _, srcName := range []string{"http", "stdin"} {
		for _, bound := range []int64{0, spillBound} {
			t.Run(srcName+"/"+map[bool]string{true: "spill", false: "memory"}[bound > 0], func(t *testing.T) {
				var logs bytes.Buffer
				o := importer.Options{Source: base + filepath.Base(gz), TargetOptions: importer.TargetOptions{
					ScratchDir: t.TempDir(),
				}, Logger: logTo(t, &logs),
					Target: filepath.Join(t.TempDir(), "disk.img")}
				if srcName == "stdin" {
					o.Source, o.SourceReader = "-", pipeOf(t, gz)
				}
				res, err := importer.Import(context.Background(), importer.WithStreamDecodeBuffer(o, bound))
				if err != nil {
					t.Log(logs.String())
				}
				require.NoError(t, err)
				assert.Equal(t, streamDecodePhases, res.Phases)
				assert.Equal(t, bound > 0, res.ScratchUsed, "spilled %d", res.ScratchBytes)
				expectImage(t, want, o.Target, false)
				assertEmptyDir(t, o.ScratchDir)
			})
		}
	}
}

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
			Target: filepath.Join(t.TempDir(), "disk.img"), Logger: testimg.Logger(t)}
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
			Target: filepath.Join(t.TempDir(), "disk.img"), Logger: testimg.Logger(t)}
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
