package importer_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testimg"
)

// An HTTP qcow2 on a server that serves ranges takes the route the engine
// chose from its tables (its route choice), and the target
// holds the image's bytes either way: the stream decoder for a compact
// image onto a file or a block device; qemu-img over ranges for a file
// mostly of bytes no table references, for one mostly of compressed
// clusters, and for one whose clusters come before their tables beyond
// what the decoder may hold.
func TestRouteChoiceForRangedQCOW2(t *testing.T) {
	testimg.Need(t, "qemu-img")
	tmp := privateTmp(t)
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 24<<20, 31)
	www := filepath.Join(dir, "www")
	require.NoError(t, os.Mkdir(www, 0o755))
	testimg.Convert(t, raw, filepath.Join(www, "disk.qcow2"), "qcow2")
	padded := testimg.Convert(t, raw, filepath.Join(www, "padded.qcow2"), "qcow2")
	st, err := os.Stat(padded)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(padded, 4*st.Size()))
	// The L1 table moves to the end when the disk outgrows it; the disk
	// then reads as the raw image followed by zeros.
	moved := testimg.Convert(t, raw, filepath.Join(www, "moved.qcow2"), "qcow2")
	testimg.Run(t, "qemu-img", "resize", "-q", "-f", "qcow2", moved, "1G")
	// Every cluster compressed: text only.
	text := filepath.Join(dir, "text.raw")
	require.NoError(t, os.WriteFile(text, bytes.Repeat([]byte("all work and no play makes jack a dull boy.\n"), 8<<20/44+1)[:8<<20], 0o644))
	testimg.Run(t, "qemu-img", "convert", "-q", "-c", "-f", "raw", "-O", "qcow2", text, filepath.Join(www, "text.qcow2"))
	rc := &rangeCounter{h: http.FileServer(http.Dir(www))}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)

	var loop string
	if os.Geteuid() == 0 {
		loop = testimg.LoopDevice(t, t.TempDir(), 24<<20)
	}
	cases := []struct {
		name, file string
		block      bool
		maxHeld    int64 // the decoder's buffer (0: its default)
		ranged     bool
	}{
		{"compact onto a file", "disk.qcow2", false, 0, false},
		{"compact onto a device", "disk.qcow2", true, 0, false},
		{"compressed onto a device", "text.qcow2", true, 0, true},
		{"padded onto a file", "padded.qcow2", false, 0, true},
		{"tables last, small buffer", "moved.qcow2", false, 1 << 20, true},
		{"tables last, default buffer", "moved.qcow2", false, 0, false},
		{"compressed onto a file", "text.qcow2", false, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "disk.img")
			if c.block {
				if loop == "" {
					t.Skip("loop devices need root")
				}
				target = loop
			}
			o := importer.Options{
				Source: srv.URL + "/" + c.file, Target: target,
				TargetOptions: importer.TargetOptions{
					ScratchDir: t.TempDir(),
				}, Logger: testLogger(t),
			}
			if c.maxHeld > 0 {
				o = importer.WithStreamDecodeBuffer(o, c.maxHeld)
			}
			before, beforeAll := rc.ranges.Load(), rc.all.Load()
			res, err := importer.Import(context.Background(), o)
			require.NoError(t, err)
			assert.False(t, res.ScratchUsed, "phases %v", res.Phases)
			gets := rc.all.Load() - beforeAll - (rc.ranges.Load() - before)
			if c.ranged {
				assert.Contains(t, res.Phases, importer.PhaseConvert)
				assert.Equal(t, int64(1), gets, "only the first GET, whose body is closed")
			} else {
				assert.NotContains(t, res.Phases, importer.PhaseConvert)
				assert.Contains(t, res.Phases, importer.PhaseTransferDataFile)
				assert.Equal(t, int64(1), gets, "not one streaming GET")
			}
			switch c.file {
			case "text.qcow2":
				expectImage(t, text, target, c.block)
			case "moved.qcow2":
				// The raw image, then zeros to 1 GiB.
				require.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, target, 24<<20))
				testimg.AssertZeros(t, target, 24<<20, 1<<30-24<<20)
			default:
				expectImage(t, raw, target, c.block)
			}
			assertEmptyDir(t, o.ScratchDir)
			assertNoSocketDir(t, tmp)
		})
	}
}
