package importer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cdi"
	"github.com/diskimport/engine/internal/testimg"
)

// dropWriter passes at most left body bytes, then kills the connection.
type dropWriter struct {
	http.ResponseWriter
	left int
}

func (d *dropWriter) Write(p []byte) (int, error) {
	if len(p) > d.left {
		d.ResponseWriter.Write(p[:d.left])
		d.ResponseWriter.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // net/http drops the connection mid-body
	}
	d.left -= len(p)
	return d.ResponseWriter.Write(p)
}

// dyingServer serves one object (with an ETag, honouring Range/If-Range
// unless noRanges); its first `drops` responses die after `cut` bytes.
type dyingServer struct {
	mu       sync.Mutex
	data     []byte
	etag     string
	drops    int
	cut      int
	noRanges bool
	after    func(s *dyingServer) // called (locked) after each request
	ranges   []string
}

func (s *dyingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.ranges = append(s.ranges, r.Header.Get("Range"))
	data, etag, drop, noRanges := s.data, s.etag, s.drops > 0, s.noRanges
	if drop {
		s.drops--
		w = &dropWriter{ResponseWriter: w, left: s.cut}
	}
	if s.after != nil {
		s.after(s)
	}
	s.mu.Unlock()
	w.Header().Set("ETag", etag)
	if noRanges {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Write(data)
		return
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
}

func (s *dyingServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ranges...)
}

func serveDying(t *testing.T, s *dyingServer) string {
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv.URL + "/disk"
}

func retryImport(t *testing.T, url string, o importer.Options) (*importer.Result, error) {
	t.Helper()
	o.Source = url
	if o.Target == "" {
		o.Target = filepath.Join(t.TempDir(), "disk.img")
	}
	o.ScratchDir = t.TempDir()
	o.RetryBackoff = 5 * time.Millisecond
	o.Logger = testimg.Logger(t)
	res, err := importer.Import(context.Background(), o)
	assertEmptyDir(t, o.ScratchDir)
	return res, err
}

// The server dies mid-transfer three times and comes back: the import
// resumes with ranges and the target holds exactly the image.
func TestImportResumesAfterServerDies(t *testing.T) {
	testimg.Need(t, "zstd")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 21)
	for _, name := range []string{"disk.raw", "disk.raw.zst"} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, name)
			if name == "disk.raw.zst" {
				p = testimg.Compress(t, raw, "zst")
			}
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			s := &dyingServer{data: data, etag: `"a1"`, drops: 3, cut: len(data) / 5}
			// One connection: this is the single stream's resume (parallel
			// ranges resume per chunk: TestParallelRangesImportByteForByte).
			res, err := retryImport(t, serveDying(t, s), importer.Options{Access: datasource.Access{Connections: 1}, Checksums: []string{testimg.FileDigest(t, p)}})
			require.NoError(t, err)
			assert.True(t, res.Complete)
			assert.Equal(t, 3, res.Retries)
			expectImage(t, raw, res.Target, false)
			reqs := s.requests()
			require.Len(t, reqs, 4)
			assert.Equal(t, "bytes="+strconv.Itoa(s.cut)+"-", reqs[1])
			var m map[string]any
			require.NoError(t, json.Unmarshal(cdi.NewTerminationMessage(res, nil).JSON(), &m))
			assert.EqualValues(t, 3, m["retries"])
		})
	}
}

// A server that ignores Range: the import starts over from the beginning
// (target aborted, scratch removed, a fresh download), and the result is
// the image, not a splice of two downloads.
func TestImportRestartsWhenRangesIgnored(t *testing.T) {
	testimg.Need(t, "qemu-img", "gzip")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 22)
	q := testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2")
	for _, p := range []string{raw, testimg.Compress(t, q, "gz")} {
		t.Run(filepath.Base(p), func(t *testing.T) {
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			s := &dyingServer{data: data, etag: `"a1"`, drops: 1, cut: len(data) * 2 / 3, noRanges: true}
			res, err := retryImport(t, serveDying(t, s), importer.Options{})
			require.NoError(t, err)
			assert.True(t, res.Complete)
			assert.Equal(t, 1, res.Retries)
			expectImage(t, raw, res.Target, false)
			// The first GET dies, the resume is answered 200 (dropped
			// unread), then a fresh GET from byte 0 completes.
			assert.Equal(t, []string{"", "bytes=" + strconv.Itoa(s.cut) + "-", ""}, s.requests())
		})
	}
}

// The object changes between attempts: the resume's If-Range no longer
// matches, the server sends the new object whole, and the import starts
// over and writes the new object. With the old object's checksum, the
// import fails with a clear mismatch instead.
func TestImportRestartsWhenObjectChanges(t *testing.T) {
	dir := t.TempDir()
	v1 := testimg.Raw(t, dir, "v1.raw", imageSize, 23)
	v2 := testimg.Raw(t, dir, "v2.raw", imageSize, 24)
	d1, err := os.ReadFile(v1)
	require.NoError(t, err)
	d2, err := os.ReadFile(v2)
	require.NoError(t, err)
	newServer := func() *dyingServer {
		return &dyingServer{data: d1, etag: `"v1"`, drops: 1, cut: len(d1) / 2, after: func(s *dyingServer) {
			s.data, s.etag = d2, `"v2"`
		}}
	}
	res, err := retryImport(t, serveDying(t, newServer()), importer.Options{})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Retries)
	expectImage(t, v2, res.Target, false)

	target := filepath.Join(t.TempDir(), "disk.img")
	res, err = retryImport(t, serveDying(t, newServer()), importer.Options{Target: target, Checksums: []string{testimg.FileDigest(t, v1)}})
	require.Error(t, err)
	assert.ErrorIs(t, err, importer.ErrChecksumMismatch)
	assert.False(t, res.Complete)
	_, serr := os.Stat(target)
	assert.True(t, os.IsNotExist(serr), "a failed import left the target file")
}

// Restart onto a block device: the aborted first attempt must not leave a
// mix, and the held-back first MiB is the image's.
func TestImportRestartOntoBlockDevice(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 25)
	loop := testimg.LoopDevice(t, dir, 8<<20)
	data, err := os.ReadFile(raw)
	require.NoError(t, err)
	s := &dyingServer{data: data, etag: `"a1"`, drops: 1, cut: len(data) / 2, noRanges: true}
	res, err := retryImport(t, serveDying(t, s), importer.Options{Target: loop})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Retries)
	expectImage(t, raw, loop, true)
}

// Permanent refusals are not retried.
func TestImportDoesNotRetryPermanentErrors(t *testing.T) {
	for _, code := range []int{401, 403, 404, 410} {
		var mu sync.Mutex
		n := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			n++
			mu.Unlock()
			http.Error(w, "no", code)
		}))
		t.Cleanup(srv.Close)
		res, err := retryImport(t, srv.URL+"/disk", importer.Options{})
		require.Error(t, err)
		assert.ErrorIs(t, err, importer.ErrSourceRefused)
		assert.Contains(t, err.Error(), strconv.Itoa(code))
		assert.Equal(t, 0, res.Retries)
		mu.Lock()
		assert.Equal(t, 1, n, "status %d was retried", code)
		mu.Unlock()
	}
}
