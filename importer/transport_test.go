package importer_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// A caller's *tls.Config or http.RoundTripper carries the requests.
func TestCallerTLSConfigAndTransport(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 1<<20, 6)
	srv := httptest.NewTLSServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	target := func() string { return filepath.Join(t.TempDir(), "disk.img") }

	_, err := importer.Import(context.Background(), importer.Options{Source: srv.URL + "/disk.raw", Target: target(), Logger: testimg.Logger(t), Retries: new(0)})
	require.ErrorIs(t, err, importer.ErrSourceUnreachable, "the test CA is not trusted by default")

	o := importer.Options{Source: srv.URL + "/disk.raw", Target: target(), Logger: testimg.Logger(t),
		TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	_, err = importer.Import(context.Background(), o)
	require.NoError(t, err)
	expectImage(t, raw, o.Target, false)

	tr := &testimg.CountingTransport{Next: srv.Client().Transport}
	o = importer.Options{Source: srv.URL + "/disk.raw", Target: target(), Logger: testimg.Logger(t), Transport: tr}
	_, err = importer.Import(context.Background(), o)
	require.NoError(t, err)
	assert.Positive(t, tr.N.Load())
	expectImage(t, raw, o.Target, false)
}

// Retries: nil is the default (10), new(0) none.
func TestRetriesZeroMeansNone(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		retries *int
		want    int64
	}{{new(0), 1}, {new(2), 3}, {nil, 11}} {
		hits.Store(0)
		_, err := importer.Import(context.Background(), importer.Options{
			Source: srv.URL + "/disk.img", Target: filepath.Join(t.TempDir(), "disk.img"), Logger: testimg.Logger(t),
			Retries: c.retries, Access: datasource.Access{
				RetryBackoff: time.Millisecond,
			},
		})
		require.ErrorIs(t, err, importer.ErrSourceRefused)
		assert.Equal(t, c.want, hits.Load())
	}
}

// Options.Egress applies to the transport built around a caller's
// TLSConfig, and cannot be combined with a caller's Transport.
func TestEgressWithCallerTLSConfigAndTransport(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	deny, err := datasource.ParseEgressList("127.0.0.0/8")
	require.NoError(t, err)
	policy := &importer.EgressPolicy{Deny: deny}
	target := filepath.Join(t.TempDir(), "disk.img")

	_, err = importer.Import(context.Background(), importer.Options{Source: srv.URL + "/disk.raw", Target: target, Logger: testimg.Logger(t),
		TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, Access: datasource.Access{
			Egress: policy,
		}})
	require.ErrorIs(t, err, importer.ErrEgressDenied)
	var ee *importer.EgressError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, "127.0.0.1", ee.Addr)

	_, err = importer.Import(context.Background(), importer.Options{Source: srv.URL + "/disk.raw", Target: target, Logger: testimg.Logger(t),
		Transport: srv.Client().Transport, Access: datasource.Access{
			Egress: policy,
		}})
	require.ErrorIs(t, err, importer.ErrInvalidOptions)
	assert.Contains(t, err.Error(), "egress policy cannot be applied to a caller's Transport")
}

// The ranged route's reads (qemu-img through our NBD export of HTTP
// ranges) are connections of the policy too: they are made by its dialer,
// and a range read redirected to a denied address fails the import with
// the policy's refusal, that address never connected to.
func TestEgressPolicyCoversRangedReads(t *testing.T) {
	testimg.Need(t, "qemu-img")
	raw, www := rawAndWebRoot(t, imageSize, 12)
	testimg.Convert(t, raw, filepath.Join(www, "disk.vdi"), "vdi")
	files := http.FileServer(http.Dir(www))
	other, otherConns := testimg.ServeOn(t, "127.0.0.3", files)
	base, _ := testimg.ServeOn(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved.vdi" && r.Header.Get("Range") != "" && !strings.HasPrefix(r.Header.Get("Range"), "bytes=0-") {
			http.Redirect(w, r, "http://"+other+"/disk.vdi", http.StatusFound)
			return
		}
		r.URL.Path = "/disk.vdi"
		files.ServeHTTP(w, r)
	}))
	var connects atomic.Int32
	deny, err := datasource.ParseEgressList("127.0.0.3")
	require.NoError(t, err)
	policy := &importer.EgressPolicy{Deny: deny, Dialer: &net.Dialer{Timeout: 5 * time.Second,
		Control: func(string, string, syscall.RawConn) error { connects.Add(1); return nil }}}

	o := importer.Options{Source: "http://" + base + "/disk.vdi", Target: filepath.Join(t.TempDir(), "disk.img"),
		TargetOptions: importer.TargetOptions{
			ScratchDir:     t.TempDir(),
			NoStreamDecode: true, // the ranged route, not the stream decoder
		}, Logger: testimg.Logger(t), Access: datasource.Access{
			Egress: policy,
		}}
	res, err := importer.Import(context.Background(), o)
	require.NoError(t, err)
	require.Contains(t, res.Phases, importer.PhaseConvert, "the ranged route")
	expectImage(t, raw, o.Target, false)
	assert.GreaterOrEqual(t, connects.Load(), int32(2), "the first GET and the range reads dial through the policy")

	o.Source, o.Target = "http://"+base+"/moved.vdi", filepath.Join(t.TempDir(), "disk.img")
	start := time.Now()
	res, err = importer.Import(context.Background(), o)
	require.ErrorIs(t, err, importer.ErrEgressDenied)
	t.Logf("refused after %v: %v", time.Since(start), err)
	assert.Zero(t, res.Retries, "a policy refusal is not retried")
	assert.Contains(t, err.Error(), "127.0.0.3 (deny 127.0.0.3/32)")
	assert.Zero(t, otherConns.Load(), "the denied address was connected to")
}

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
			b, err := json.Marshal(res)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &m))
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
	raw, q := testimg.RawAndQCOW2(t, dir, imageSize, 22)
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
