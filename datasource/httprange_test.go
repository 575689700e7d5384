package datasource_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
)

// openRanged opens src, closes the stream body and returns a range reader.
func openRanged(t *testing.T, src datasource.Source) *datasource.RangeReader {
	t.Helper()
	st, err := src.Open(context.Background())
	require.NoError(t, err)
	st.Body.Close()
	require.NotNil(t, st.Ranges, "server serves ranges but the stream is not offered as ranged")
	rr, err := st.Ranges.Open(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { rr.Close() })
	return rr
}

// assertReplacedRefused checks that a range read of rr, whose object was
// replaced since it was opened, is refused as replaced, not mixed in.
func assertReplacedRefused(t *testing.T, rr *datasource.RangeReader) {
	t.Helper()
	_, err := rr.ReadAt(make([]byte, 4096), 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "replaced during the import")
	assert.ErrorIs(t, err, errdefs.ErrSourceRefused)
}

func TestRangeReaderContent(t *testing.T) {
	data := testImage(t, 3<<20+1234)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "disk.qcow2"), data, 0o644))
	srv := newServer(t, http.FileServer(http.Dir(dir)))
	src, err := datasource.NewHTTP(srv.URL+"/disk.qcow2", datasource.Config{})
	require.NoError(t, err)
	rr := openRanged(t, src)
	assert.Equal(t, int64(len(data)), rr.Size())

	buf := make([]byte, 100000)
	n, err := rr.ReadAt(buf, 12345)
	require.NoError(t, err)
	assert.Equal(t, len(buf), n)
	assert.Equal(t, data[12345:12345+len(buf)], buf)
	// Across the end: short read with io.EOF; past the end: io.EOF.
	n, err = rr.ReadAt(buf, int64(len(data))-10)
	assert.Equal(t, io.EOF, err)
	assert.Equal(t, 10, n)
	assert.Equal(t, data[len(data)-10:], buf[:10])
	_, err = rr.ReadAt(buf, int64(len(data)))
	assert.Equal(t, io.EOF, err)

	// Concurrent readers reassemble the whole object.
	out := make([]byte, len(data))
	var wg sync.WaitGroup
	const chunk = 256 << 10
	for off := 0; off < len(data); off += chunk {
		wg.Go(func() {
			end := min(off+chunk, len(data))
			n, err := rr.ReadAt(out[off:end], int64(off))
			assert.Equal(t, end-off, n)
			if end < len(data) {
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, sum(data), sum(out))
	assert.NoError(t, rr.Close())
	_, err = rr.ReadAt(buf, 0)
	assert.ErrorIs(t, err, errdefs.ErrCancelled, "reads after Close must fail")
}

func TestRangeReaderObjectReplaced(t *testing.T) {
	data := testImage(t, 1<<20)
	other := bytes.Clone(data)
	other[100] ^= 0xff
	t.Run("last-modified", func(t *testing.T) {
		dir := t.TempDir()
		p := filepath.Join(dir, "disk.vmdk")
		require.NoError(t, os.WriteFile(p, data, 0o644))
		old := time.Now().Add(-time.Hour)
		require.NoError(t, os.Chtimes(p, old, old))
		srv := newServer(t, http.FileServer(http.Dir(dir)))
		src, err := datasource.NewHTTP(srv.URL+"/disk.vmdk", datasource.Config{})
		require.NoError(t, err)
		rr := openRanged(t, src)
		buf := make([]byte, 4096)
		_, err = rr.ReadAt(buf, 0)
		require.NoError(t, err)
		// Same size, new content and time.
		require.NoError(t, os.WriteFile(p, other, 0o644))
		_, err = rr.ReadAt(buf, 0)
		require.Error(t, err)
		assert.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
		assert.Contains(t, err.Error(), "changed while reading")
	})
	t.Run("etag", func(t *testing.T) {
		var cur atomic.Pointer[[]byte]
		cur.Store(&data)
		srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b := *cur.Load()
			tag := `"v1"`
			if &b[0] != &data[0] {
				tag = `"v2"`
			}
			w.Header().Set("ETag", tag)
			http.ServeContent(w, r, "disk.vhdx", time.Time{}, bytes.NewReader(b))
		}))
		src, err := datasource.NewHTTP(srv.URL, datasource.Config{})
		require.NoError(t, err)
		rr := openRanged(t, src)
		buf := make([]byte, 4096)
		_, err = rr.ReadAt(buf, 8192)
		require.NoError(t, err)
		assert.Equal(t, data[8192:8192+4096], buf)
		cur.Store(&other)
		_, err = rr.ReadAt(buf, 8192)
		require.Error(t, err)
		assert.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
		assert.Contains(t, err.Error(), "changed while reading")
	})
}

func TestRangeReaderNotOfferedWithoutRanges(t *testing.T) {
	data := testImage(t, 64<<10)
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "65536")
		w.Write(data)
	}))
	src, err := datasource.NewHTTP(srv.URL, datasource.Config{})
	require.NoError(t, err)
	st, got, err := readAll(t, src)
	require.NoError(t, err)
	assert.Equal(t, sum(data), sum(got))
	assert.Nil(t, st.Ranges)
}

func TestRangeReaderAuthCAHeaders(t *testing.T) {
	data := testImage(t, 512<<10)
	var ranged atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != "alice" || p != "s3cret" || r.Header.Get("X-Token") != "abc" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.Header.Get("Range") != "" {
			ranged.Add(1)
		}
		http.ServeContent(w, r, "disk.qcow2", time.Unix(1.7e9, 0), bytes.NewReader(data))
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	writeCertPEM(t, dir, "ca.crt", srv)
	src, err := datasource.NewHTTP(srv.URL, datasource.Config{
		Access: datasource.Access{
			Username: "alice",
			Password: "s3cret",
			Headers:  []string{"X-Token: abc"},
			CertDir:  dir,
		},
	})
	require.NoError(t, err)
	st, err := src.Open(context.Background())
	require.NoError(t, err)
	st.Body.Close()
	require.NotNil(t, st.Ranges)
	assert.False(t, st.Ranges.Plain, "credentials are needed: not plain")
	rr, err := st.Ranges.Open(context.Background())
	require.NoError(t, err)
	defer rr.Close()
	buf := make([]byte, 200000)
	_, err = rr.ReadAt(buf, 300000)
	require.NoError(t, err)
	assert.Equal(t, data[300000:500000], buf)
	assert.Equal(t, int32(1), ranged.Load())

	// Without the credentials, the range read is refused (and not retried).
	src2, err := datasource.NewHTTP(srv.URL, datasource.Config{Access: datasource.Access{CertDir: dir, Headers: []string{"X-Token: abc"}}})
	require.NoError(t, err)
	_, err = src2.Open(context.Background())
	require.Error(t, err)
	var se *errdefs.HTTPStatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusUnauthorized, se.StatusCode)
}

func TestRangeReaderRetries(t *testing.T) {
	data := testImage(t, 256<<10)
	var fails atomic.Int32
	fails.Store(2)
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" && fails.Add(-1) >= 0 {
			if fails.Load() == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			// A cut-off body: the read resumes at byte 1010.
			w.Header().Set("Content-Range", "bytes 1000-100999/262144")
			w.Header().Set("Content-Length", "100000")
			w.Header().Set("Last-Modified", time.Unix(1.7e9, 0).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusPartialContent)
			w.Write(data[1000:1010])
			return
		}
		http.ServeContent(w, r, "disk", time.Unix(1.7e9, 0), bytes.NewReader(data))
	}))
	src, err := datasource.NewHTTP(srv.URL, datasource.Config{Access: datasource.Access{RetryBackoff: time.Millisecond}})
	require.NoError(t, err)
	rr := openRanged(t, src)
	buf := make([]byte, 100000)
	n, err := rr.ReadAt(buf, 1000)
	require.NoError(t, err)
	assert.Equal(t, len(buf), n)
	assert.Equal(t, data[1000:101000], buf)
	assert.Equal(t, 2, retriesOf(src))
}

func TestRangedProbeNeedsPartialContent(t *testing.T) {
	data := testImage(t, 64<<10)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "disk.img"), data, 0o644))
	serves := newServer(t, http.FileServer(http.Dir(dir)))
	claims := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Accept-Ranges", "bytes")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Write(data) // 200 with the whole object, whatever the Range
	}))
	for _, c := range []struct {
		name   string
		url    string
		probed bool
	}{
		{"serves ranges", serves.URL + "/disk.img", true},
		{"advertises ranges, answers 200", claims.URL, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, err := datasource.NewHTTP(c.url, datasource.Config{})
			require.NoError(t, err)
			st, err := src.Open(context.Background())
			require.NoError(t, err)
			st.Body.Close()
			require.NotNil(t, st.Ranges)
			err = st.Ranges.Probe(context.Background())
			if c.probed {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
		})
	}
}
