package importer_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testimg"
)

// An LZ4 frame stream (lz4 -c) is decoded in one pass like gz, xz and zst:
// a raw.lz4 straight onto the target and a qcow2.lz4 through the stream
// decoder, no scratch, over HTTP and from standard input, onto a file and a
// loop device, byte for byte.
func TestLZ4Decoded(t *testing.T) {
	testimg.Need(t, "qemu-img", "lz4")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 41)
	qcow := testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2")
	for _, p := range []string{raw, qcow} {
		testimg.Run(t, "lz4", "-q", p, p+".lz4")
	}
	base := testimg.Serve(t, dir)
	targets := map[string]func(t *testing.T) string{"file": func(t *testing.T) string { return filepath.Join(t.TempDir(), "disk.img") }}
	if os.Geteuid() == 0 {
		targets["loop"] = func(t *testing.T) string { return testimg.LoopDevice(t, t.TempDir(), imageSize+1<<20) }
	}
	for _, c := range []struct{ file, format string }{{"disk.raw.lz4", "raw"}, {"disk.qcow2.lz4", "qcow2"}} {
		for kind, target := range targets {
			for _, via := range []string{"http", "stdin"} {
				t.Run(c.file+"/"+via+"/"+kind, func(t *testing.T) {
					o := importer.Options{Source: base + c.file, Target: target(t), TargetOptions: importer.TargetOptions{ScratchDir: t.TempDir()}, Logger: testLogger(t)}
					if via == "stdin" {
						f, err := os.Open(filepath.Join(dir, c.file))
						require.NoError(t, err)
						defer f.Close()
						o.Source, o.SourceReader = "-", f
					}
					res, err := importer.Import(context.Background(), o)
					require.NoError(t, err)
					assert.Equal(t, c.format, res.SourceFormat)
					assert.Equal(t, []string{"lz4"}, res.Compressions)
					assert.False(t, res.ScratchUsed)
					assert.Equal(t, testimg.Digest(t, raw, imageSize), testimg.Digest(t, o.Target, imageSize))
				})
			}
		}
	}
}
