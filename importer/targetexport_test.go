package importer_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// qemu-img converts onto a block device through the engine's NBD export of
// it: the device ends up holding exactly what `qemu-img convert -O raw`
// makes of the image, zero runs are deallocated rather than written, and the
// device's old content past the image stays.
func TestConvertOntoDeviceMatchesQemuImg(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	const size = 12<<20 + 512 // not a multiple of 4 KiB: an unaligned end
	raw := testimg.Raw(t, dir, "disk.raw", size, 71)
	const devSize = 16 << 20
	loop := testimg.LoopDevice(t, dir, devSize) // 0xA5 everywhere
	for _, c := range []struct{ name, format string }{
		{"disk.qcow2", "qcow2"}, {"disk.vmdk", "vmdk"}, {"disk.vhdx", "vhdx"},
	} {
		t.Run(c.format, func(t *testing.T) {
			img := testimg.Convert(t, raw, filepath.Join(dir, c.name), c.format)
			want := filepath.Join(dir, c.format+".want")
			testimg.Run(t, "qemu-img", "convert", "-f", c.format, "-O", "raw", img, want)
			res, err := importer.Import(context.Background(), importer.Options{Source: img, Target: loop, Logger: testimg.Logger(t)})
			require.NoError(t, err)
			assert.True(t, res.Complete)
			st, err := os.Stat(want)
			require.NoError(t, err)
			assert.Equal(t, testimg.Digest(t, want, -1), testimg.Digest(t, loop, st.Size()), "device differs from qemu-img convert -O raw")
			assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, loop, size))
			assert.Less(t, res.DataBytes, int64(size), "zero runs counted as data")
			assert.Greater(t, res.DataBytes, int64(size/2))
			past := filepath.Join(dir, "past")
			require.NoError(t, copyRange(loop, past, st.Size(), devSize-st.Size()))
			assert.Equal(t, bytes.Repeat([]byte{0xA5}, int(devSize-st.Size())), mustRead(t, past), "the device past the image was touched")
		})
	}
}

// While qemu-img writes a device through the export, progress still moves:
// qemu-img's percentage and the bytes the export took both grow. The image
// is read over a slow HTTP server (the ranged path, a second NBD export) so
// the conversion spans several progress ticks.
func TestConvertOntoDeviceReportsProgress(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	const size = 16 << 20
	raw, img := testimg.RawAndQCOW2(t, dir, size, 72)
	data := mustRead(t, img)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "disk.qcow2", time.Unix(1.7e9, 0), &slowReadSeeker{r: bytes.NewReader(data), delay: 50 * time.Millisecond})
	}))
	t.Cleanup(srv.Close)
	loop := testimg.LoopDevice(t, dir, size)

	var mu sync.Mutex
	var seen []importer.Progress
	res, err := importer.Import(context.Background(), importer.Options{
		Source: srv.URL + "/disk.qcow2", Target: loop, Logger: testimg.Logger(t),
		TargetOptions: importer.TargetOptions{
			NoStreamDecode: true,
		}, // a plain qcow2 is otherwise decoded as a stream (the route choice)
		Progress: func(p importer.Progress) {
			mu.Lock()
			defer mu.Unlock()
			if p.Phase == importer.PhaseConvert {
				seen = append(seen, p)
			}
		},
	})
	require.NoError(t, err)
	expectImage(t, raw, loop, true)
	assert.Contains(t, strings.Join(phaseNames(res.Phases), " "), "Convert")
	mu.Lock()
	defer mu.Unlock()
	t.Logf("progress during Convert: %+v", seen)
	require.GreaterOrEqual(t, len(seen), 2, "too few progress reports during Convert")
	var moved, mid bool
	for i := 1; i < len(seen); i++ {
		assert.GreaterOrEqual(t, seen[i].Percent, seen[i-1].Percent)
		assert.GreaterOrEqual(t, seen[i].BytesWritten, seen[i-1].BytesWritten)
		moved = moved || seen[i].BytesWritten > seen[i-1].BytesWritten && seen[i].Percent > seen[i-1].Percent
	}
	for _, p := range seen {
		mid = mid || p.Percent > 0 && p.Percent < 100 && p.BytesWritten > 0 && p.BytesWritten < size
	}
	assert.True(t, moved, "progress did not move during Convert")
	assert.True(t, mid, "no report in the middle of the conversion")
}

// slowReadSeeker delays every Read, so an HTTP server built on it is slow.
type slowReadSeeker struct {
	r     io.ReadSeeker
	delay time.Duration
}

func (s *slowReadSeeker) Read(p []byte) (int, error) {
	time.Sleep(s.delay)
	return s.r.Read(p)
}

func (s *slowReadSeeker) Seek(off int64, whence int) (int64, error) { return s.r.Seek(off, whence) }

func phaseNames(ps []importer.Phase) []string {
	var out []string
	for _, p := range ps {
		out = append(out, string(p))
	}
	return out
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// copyRange copies n bytes of src from off into a new file dst.
func copyRange(src, dst string, off, n int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	_, err = io.Copy(out, io.NewSectionReader(in, off, n))
	return err
}
