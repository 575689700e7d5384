package importer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testimg"
)

// importFails runs an import that must fail with want, never reporting the
// target complete, and leaving no target file and no scratch file behind,
// nor anything else in the target's directory.
func importFails(t *testing.T, o importer.Options, want error) error {
	t.Helper()
	if o.Target == "" {
		o.Target = filepath.Join(t.TempDir(), "disk.img")
	}
	err := importFailsWith(t, o)
	assert.ErrorIs(t, err, want)
	assertEmptyDir(t, filepath.Dir(o.Target))
	return err
}

func TestTruncatedQCOW2(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 3)
	q := testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2")
	st, err := os.Stat(q)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(q, st.Size()/2))
	err = importFails(t, importer.Options{Source: q}, importer.ErrInvalidImage)
	base := testimg.Serve(t, dir)
	importFails(t, importer.Options{Source: base + "disk.qcow2"}, importer.ErrInvalidImage)
	_ = err
}

func TestTruncatedAndCorruptCompression(t *testing.T) {
	testimg.Need(t, "qemu-img", "gzip", "xz", "zstd")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 4)
	for _, kind := range []string{"gz", "xz", "zst"} {
		t.Run("truncated-"+kind, func(t *testing.T) {
			p := testimg.Compress(t, raw, kind)
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			cut := filepath.Join(t.TempDir(), "cut."+kind)
			require.NoError(t, os.WriteFile(cut, b[:len(b)*2/3], 0o644))
			importFails(t, importer.Options{Source: cut}, importer.ErrInvalidImage)
		})
	}
	t.Run("corrupt-gzip", func(t *testing.T) {
		p := testimg.Compress(t, raw, "gz")
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		for i := len(b) / 2; i < len(b)/2+64; i++ {
			b[i] ^= 0x5a
		}
		bad := filepath.Join(t.TempDir(), "bad.gz")
		require.NoError(t, os.WriteFile(bad, b, 0o644))
		importFails(t, importer.Options{Source: bad}, importer.ErrInvalidImage)
	})
}

func TestHTTPFailures(t *testing.T) {
	data := bytes.Repeat([]byte("dsk\x00"), 64<<10) // binary: a text body is refused as not a disk
	mux := http.NewServeMux()
	mux.HandleFunc("/500", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) })
	mux.HandleFunc("/short", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.WriteHeader(200)
		w.Write(data[:len(data)/3])
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	err := importFails(t, importer.Options{Source: srv.URL + "/missing"}, importer.ErrSourceRefused)
	assert.Contains(t, err.Error(), "404 Not Found")
	var se *importer.HTTPStatusError
	require.True(t, errors.As(err, &se))
	assert.Equal(t, 404, se.StatusCode)

	// 5xx and drops are retried (quickly here), then reported with the cause.
	err = importFails(t, importer.Options{Source: srv.URL + "/500", Access: datasource.Access{RetryBackoff: time.Millisecond}, Retries: new(3)}, importer.ErrSourceRefused)
	assert.Contains(t, err.Error(), "500")
	assert.Contains(t, err.Error(), "gave up after 3 retries")

	importFails(t, importer.Options{Source: srv.URL + "/short", Access: datasource.Access{RetryBackoff: time.Millisecond}, Retries: new(3)}, importer.ErrSourceUnreachable)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	importFails(t, importer.Options{Source: "http://" + addr + "/disk.img", Access: datasource.Access{RetryBackoff: time.Millisecond}}, importer.ErrSourceUnreachable)
}

func TestUnsafeImages(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "base.raw", 1<<20, 5)
	base := testimg.Serve(t, dir)

	testimg.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-b", raw, "-F", "raw", filepath.Join(dir, "backed.qcow2"))
	testimg.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-o", "data_file="+filepath.Join(dir, "data.raw"), filepath.Join(dir, "datafile.qcow2"), "1M")
	testimg.Convert(t, raw, filepath.Join(dir, "flat.vmdk"), "vmdk", "subformat=monolithicFlat")
	for _, name := range []string{"backed.qcow2", "datafile.qcow2", "flat.vmdk"} {
		t.Run(name, func(t *testing.T) {
			importFails(t, importer.Options{Source: filepath.Join(dir, name)}, importer.ErrUnsafeImage)
			importFails(t, importer.Options{Source: base + name}, importer.ErrUnsafeImage)
		})
	}
}

func TestChecksumMismatch(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 6)
	q := testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2")
	base := testimg.Serve(t, dir)
	wrong := "sha256:" + strings.Repeat("ab", 32)
	for _, src := range []string{raw, q, base + "disk.raw", base + "disk.qcow2"} {
		err := importFails(t, importer.Options{Source: src, Checksums: []string{wrong}}, importer.ErrChecksumMismatch)
		assert.Contains(t, err.Error(), "checksum mismatch")
	}
	// Two checksums, one right and one wrong: still a mismatch.
	importFails(t, importer.Options{Source: raw, Checksums: []string{testimg.FileDigest(t, raw), "md5:" + strings.Repeat("0", 32)}}, importer.ErrChecksumMismatch)
}

func TestImageLargerThanDevice(t *testing.T) {
	testimg.Need(t, "qemu-img", "zstd")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "big.raw", 12<<20, 7)
	q := testimg.Convert(t, raw, filepath.Join(dir, "big.qcow2"), "qcow2")
	zst := testimg.Compress(t, raw, "zst")
	base := testimg.Serve(t, dir)
	loop := testimg.LoopDevice(t, dir, 8<<20)
	before := testimg.Digest(t, loop, 1<<20)
	for _, src := range []string{q, raw, base + "big.qcow2", base + "big.raw", base + "big.raw.zst", zst} {
		t.Run(filepath.Base(src), func(t *testing.T) {
			o := importer.Options{Source: src, Target: loop, TargetOptions: importer.TargetOptions{ScratchDir: t.TempDir()}, Logger: testimg.Logger(t)}
			res, err := importer.Import(context.Background(), o)
			require.Error(t, err)
			assert.ErrorIs(t, err, importer.ErrTargetTooSmall)
			assert.False(t, res.Complete)
			if strings.HasSuffix(src, ".zst") {
				// Its size is known only once it passes the end: writing
				// began, and the device's old head was zeroed first.
				testimg.AssertZeros(t, loop, 0, 1<<20)
			} else {
				assert.Equal(t, before, testimg.Digest(t, loop, 1<<20), "refused before writing, yet the device's first MiB changed")
			}
			assertEmptyDir(t, o.ScratchDir)
		})
	}
}

func TestFileTargetTooSmallForRequestedSize(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 4<<20, 8)
	q := testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2")
	for _, src := range []string{raw, q} {
		err := importFails(t, importer.Options{Source: src, TargetOptions: importer.TargetOptions{Size: 2 << 20}}, importer.ErrTargetTooSmall)
		var se *importer.SizeError
		require.True(t, errors.As(err, &se))
		assert.Contains(t, err.Error(), "2097152")
	}
}
