package uploadserver_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/uploadserver"
)

// An upload of a qcow2 or streamOptimized vmdk is decoded as it arrives
// (RouteStreamDecode), with no scratch copy; an async upload is answered
// once the decoder has drained it, and a damaged image is refused as
// before.

var uploadStreamDecodePhases = []importer.Phase{importer.PhaseInfo, importer.PhaseTransferDataFile, importer.PhaseResize, importer.PhaseCommit, importer.PhaseComplete}

func TestUploadStreamDecode(t *testing.T) {
	testimg.Need(t, "qemu-img", "qemu-io", "gzip")
	dir := t.TempDir()
	raw, qcow := testimg.RawAndQCOW2(t, dir, diskSize, 12)
	vmdk := testimg.Convert(t, raw, filepath.Join(dir, "disk.vmdk"), "vmdk", "subformat=streamOptimized")
	// Tables after their data, and internal snapshots: still no scratch.
	late := testimg.Convert(t, raw, filepath.Join(dir, "late.qcow2"), "qcow2")
	testimg.Run(t, "qemu-img", "snapshot", "-c", "s1", late)
	testimg.Run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x42 1M 64k", late)
	images := []struct{ name, path, qfmt string }{
		{"qcow2", qcow, "qcow2"},
		{"qcow2.gz", testimg.Compress(t, qcow, "gz"), "qcow2"},
		{"vmdk", vmdk, "vmdk"},
		{"late-snapshot.qcow2", late, "qcow2"},
	}
	for _, img := range images {
		want := qemuRawOf(t, strings.TrimSuffix(img.path, ".gz"), img.qfmt)
		for _, m := range []struct {
			path  string
			async bool
		}{{uploadserver.PathUpload, false}, {uploadserver.PathUploadAsync, true}} {
			t.Run(img.name+"/"+map[bool]string{false: "sync", true: "async"}[m.async], func(t *testing.T) {
				o := fileTarget(t)
				h, base := serve(t, uploadserver.Options{Import: o})
				code, body := post(t, base+m.path, img.path, "", false)
				require.Equal(t, http.StatusOK, code, body)
				if m.async {
					assert.Contains(t, body, "upload received")
					waitStatus(t, h, func(s uploadserver.Status) bool { return !s.Busy })
				}
				res, err, ok := h.Last()
				require.True(t, ok, "last error %v", err)
				require.NoError(t, err)
				assert.True(t, res.Complete)
				assert.Equal(t, uploadStreamDecodePhases, res.Phases)
				assert.False(t, res.ScratchUsed)
				assert.Zero(t, res.ScratchBytes)
				assert.Equal(t, testimg.Digest(t, want, -1), testimg.Digest(t, o.Target, -1))
				ents, err := os.ReadDir(o.ScratchDir)
				require.NoError(t, err)
				assert.Empty(t, ents, "scratch directory")
			})
		}
	}
}

// TestUploadStreamDecodeDamaged: a qcow2 cut short is refused with 400,
// sync or async (the async answer waits: the source is never drained),
// and the target is not left behind.
func TestUploadStreamDecodeDamaged(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", diskSize, 13)
	q := testimg.Convert(t, raw, filepath.Join(dir, "cut.qcow2"), "qcow2")
	require.NoError(t, os.Truncate(q, testimg.FileSize(t, q)/2))
	for _, path := range []string{uploadserver.PathUpload, uploadserver.PathUploadAsync} {
		t.Run(strings.Trim(path, "/"), func(t *testing.T) {
			o := fileTarget(t)
			h, base := serve(t, uploadserver.Options{Import: o})
			code, body := post(t, base+path, q, "", false)
			assert.Equal(t, http.StatusBadRequest, code, body)
			assert.Contains(t, body, "truncated")
			_, err, ok := h.Last()
			assert.False(t, ok)
			require.Error(t, err)
			assert.NoFileExists(t, o.Target)
		})
	}
}

func qemuRawOf(t *testing.T, path, qfmt string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "want.raw")
	testimg.Run(t, "qemu-img", "convert", "-q", "-f", qfmt, "-O", "raw", path, out)
	return out
}
