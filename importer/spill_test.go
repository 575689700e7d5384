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
	dir := t.TempDir()
	gz, want := lateTablesQCOW2(t, dir)
	base := testimg.Serve(t, dir)
	loop := ""
	if os.Geteuid() == 0 {
		loop = testimg.LoopDevice(t, dir, 8<<20)
	}
	for _, srcName := range []string{"http", "stdin", "stdin-block"} {
		t.Run(srcName, func(t *testing.T) {
			block := strings.HasSuffix(srcName, "-block")
			if block && loop == "" {
				t.Skip("loop devices need root")
			}
			var logs bytes.Buffer
			o := importer.Options{Source: base + filepath.Base(gz), TargetOptions: importer.TargetOptions{
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
// directory, an HTTP source still restarts on the scratch route (which
// reports that scratch is required, as it always did), and a one-time
// stream fails at once with ErrScratchSpaceRequired naming the source and
// the bytes; neither leaves anything on the target.
func TestStreamDecodeOverflowWithoutScratch(t *testing.T) {
	dir := t.TempDir()
	gz, _ := lateTablesQCOW2(t, dir)
	base := testimg.Serve(t, dir)
	loop := ""
	if os.Geteuid() == 0 {
		loop = testimg.LoopDevice(t, dir, 8<<20)
	}
	for _, srcName := range []string{"http", "stdin", "stdin-block", "http-block"} {
		t.Run(srcName, func(t *testing.T) {
			block := strings.HasSuffix(srcName, "-block")
			if block && loop == "" {
				t.Skip("loop devices need root")
			}
			srcName = strings.TrimSuffix(srcName, "-block")
			var logs bytes.Buffer
			o := importer.Options{Source: base + filepath.Base(gz), TargetOptions: importer.TargetOptions{
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
