package importer_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testimg"
)

// serveWhole serves the files of dir on 127.0.0.1 without byte ranges: no
// Accept-Ranges, and a Range header is answered with the whole file, so
// the engine cannot read the image in place. It counts the requests.
func serveWhole(t *testing.T, dir string, requests *atomic.Int64) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		f, err := os.Open(filepath.Join(dir, filepath.Base(r.URL.Path)))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
		if r.Method == http.MethodHead {
			return
		}
		_, _ = io.Copy(w, f)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}

// TestStreamDecodeVHDAndVDI: a dynamic VHD, a VDI and a VHDX streamed over HTTP
// without ranges are decoded straight onto a file or a device: no
// scratch, the stream-decode phases, qemu-img's bytes.
func TestStreamDecodeVHDAndVDI(t *testing.T) {
	testimg.Need(t, "qemu-img", "gzip", "zstd")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 51)
	vhd := testimg.Convert(t, raw, filepath.Join(dir, "disk.vhd"), "vpc")
	vhdForced := testimg.Convert(t, raw, filepath.Join(dir, "forced.vhd"), "vpc", "force_size=on")
	vdi := testimg.Convert(t, raw, filepath.Join(dir, "disk.vdi"), "vdi")
	static := testimg.Convert(t, raw, filepath.Join(dir, "static.vdi"), "vdi", "static=on")
	vhdx := testimg.Convert(t, raw, filepath.Join(dir, "disk.vhdx"), "vhdx")
	images := map[string]string{ // name → qemu-img's raw of it
		filepath.Base(testimg.Compress(t, vhd, "gz")):        qemuRaw(t, vhd, "vpc"),
		filepath.Base(testimg.Compress(t, vhdForced, "zst")): qemuRaw(t, vhdForced, "vpc"),
		filepath.Base(vhd): qemuRaw(t, vhd, "vpc"),
		filepath.Base(testimg.Compress(t, vdi, "zst")):   qemuRaw(t, vdi, "vdi"),
		filepath.Base(testimg.Compress(t, static, "gz")): qemuRaw(t, static, "vdi"),
		filepath.Base(testimg.Compress(t, vhdx, "gz")):   qemuRaw(t, vhdx, "vhdx"),
	}
	var requests atomic.Int64
	base := serveWhole(t, dir, &requests)
	loop := ""
	if os.Geteuid() == 0 {
		loop = testimg.LoopDevice(t, dir, 8<<20)
	}
	for name, want := range images {
		testimg.ForEachTarget(t, name, loop, func(t *testing.T, tg testimg.Target) {
			var logs bytes.Buffer
			o := importer.Options{Source: base + name, TargetOptions: importer.TargetOptions{
				ScratchDir: t.TempDir(),
			}, Logger: logTo(t, &logs),
				Target: tg.Path}
			before := requests.Load()
			res, err := importer.Import(context.Background(), o)
			if err != nil {
				t.Log(logs.String())
			}
			require.NoError(t, err)
			assert.Positive(t, requests.Load()-before, "the image came from the server")
			assert.True(t, res.Complete)
			assert.False(t, res.ScratchUsed)
			assert.Zero(t, res.ScratchBytes)
			assert.Equal(t, streamDecodePhases, res.Phases)
			assert.Contains(t, logs.String(), "decoded straight onto the target")
			st, err := os.Stat(want)
			require.NoError(t, err)
			assert.Equal(t, st.Size(), res.VirtualSize)
			assert.Positive(t, res.DataBytes)
			expectImage(t, want, o.Target, tg.Block)
			assertEmptyDir(t, o.ScratchDir)
			if !tg.Block {
				assertOnly(t, filepath.Dir(o.Target), "disk.img")
			}
		})
	}
}

// TestStreamDecodeVHDXTooBig: a VHDX's virtual size is only in its
// metadata region, past Info's header checks; the decoder learns it before
// any block reaches the target and refuses a disk larger than the target,
// with nothing written.
func TestStreamDecodeVHDXTooBig(t *testing.T) {
	testimg.Need(t, "qemu-img", "gzip")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 16<<20, 52)
	vhdx := testimg.Compress(t, testimg.Convert(t, raw, filepath.Join(dir, "big.vhdx"), "vhdx"), "gz")
	var requests atomic.Int64
	base := serveWhole(t, dir, &requests)
	for _, tgtName := range []string{"file", "block"} {
		t.Run(tgtName, func(t *testing.T) {
			o := importer.Options{Source: base + filepath.Base(vhdx), TargetOptions: importer.TargetOptions{
				ScratchDir: t.TempDir(),
				Size:       8 << 20,
			},
				Target: filepath.Join(t.TempDir(), "disk.img")}
			if tgtName == "block" {
				if os.Geteuid() != 0 {
					t.Skip("loop devices need root")
				}
				o.Target, o.Size = testimg.LoopDevice(t, dir, 8<<20), 0
				require.NoError(t, os.WriteFile(o.Target, bytes.Repeat([]byte{0xA5}, 8<<20), 0))
			}
			res, err := importer.Import(context.Background(), o)
			require.ErrorIs(t, err, importer.ErrTargetTooSmall)
			assert.Contains(t, err.Error(), "16.0 MiB")
			assert.False(t, res.Complete)
			assertEmptyDir(t, o.ScratchDir)
			if tgtName == "file" {
				assertEmptyDir(t, filepath.Dir(o.Target))
				return
			}
			got, err := os.ReadFile(o.Target)
			require.NoError(t, err)
			assert.Equal(t, bytes.Repeat([]byte{0xA5}, 8<<20), got, "the device keeps its old bytes")
		})
	}
}
