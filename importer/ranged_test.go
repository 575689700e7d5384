package importer_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testkit/farmirror"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

// rangeCounter wraps a handler and counts the requests with a Range header.
type rangeCounter struct {
	h      http.Handler
	ranges atomic.Int64
	all    atomic.Int64
}

func (c *rangeCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.all.Add(1)
	if r.Header.Get("Range") != "" {
		c.ranges.Add(1)
	}
	c.h.ServeHTTP(w, r)
}

// serveCountingRanges serves the files of www over HTTP on 127.0.0.1,
// counting the requests and those with a Range header.
func serveCountingRanges(t *testing.T, www string) (*httptest.Server, *rangeCounter) {
	rc := &rangeCounter{h: http.FileServer(http.Dir(www))}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	return srv, rc
}

// privateTmp points TMPDIR (where the NBD socket directory goes) at a test
// directory, so the test can see that nothing is left behind.
func privateTmp(t *testing.T) string {
	d := t.TempDir()
	t.Setenv("TMPDIR", d)
	return d
}

// assertNoSocketDir checks that the NBD socket directory is gone.
func assertNoSocketDir(t *testing.T, tmp string) {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(tmp, "importer-nbd-*"))
	require.NoError(t, err)
	assert.Empty(t, left)
}

func TestRangedFormatsReadInPlace(t *testing.T) {
	testimg.Need(t, "qemu-img")
	tmp := privateTmp(t)
	raw, www := rawAndWebRoot(t, imageSize, 11)
	cases := []struct {
		name, file, qfmt, want string
		opts                   []string
		whole                  bool // read whole and decoded instead (see streamOptimized)
		decoded                bool // decoded as a stream after reading its tables by ranges (the route choice)
		noDecode               bool // NoStreamDecode: forced onto ranges
	}{
		{"disk.qcow2", "disk.qcow2", "qcow2", "qcow2", nil, false, true, false},
		{"disk.qcow2 forced ranged", "disk.qcow2", "qcow2", "qcow2", nil, false, false, true},
		{"disk.vmdk", "disk.vmdk", "vmdk", "vmdk", nil, false, false, false},
		{"stream.vmdk", "stream.vmdk", "vmdk", "vmdk", []string{"subformat=streamOptimized"}, true, false, false},
		{"disk.vhdx", "disk.vhdx", "vhdx", "vhdx", nil, false, true, false},
		{"disk.vhdx forced ranged", "disk.vhdx", "vhdx", "vhdx", nil, false, false, true},
		{"dynamic.vhd", "dynamic.vhd", "vpc", "vhd", []string{"subformat=dynamic", "force_size=on"}, false, true, false},
		{"dynamic.vhd forced ranged", "dynamic.vhd", "vpc", "vhd", []string{"subformat=dynamic", "force_size=on"}, false, false, true},
		{"disk.vdi", "disk.vdi", "vdi", "vdi", nil, false, true, false},
		{"disk.vdi forced ranged", "disk.vdi", "vdi", "vdi", nil, false, false, true},
	}
	for _, c := range cases {
		testimg.Convert(t, raw, filepath.Join(www, c.file), c.qfmt, c.opts...)
	}
	srv, rc := serveCountingRanges(t, www)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, beforeAll := rc.ranges.Load(), rc.all.Load()
			o := importer.Options{
				Source: srv.URL + "/" + c.file, Target: filepath.Join(t.TempDir(), "disk.img"),
				TargetOptions: importer.TargetOptions{
					ScratchDir:     t.TempDir(),
					NoStreamDecode: c.noDecode,
				}, Logger: testimg.Logger(t),
				// The counts below are the route's requests: a stream on
				// one GET (parallel ranges have tests of their own).
				Access: datasource.Access{
					Connections: 1,
				},
			}
			res, err := importer.Import(context.Background(), o)
			require.NoError(t, err)
			assert.Equal(t, c.want, res.SourceFormat)
			switch {
			case c.whole:
				// Decoded straight onto the target as it streams.
				assert.False(t, res.ScratchUsed, "phases %v", res.Phases)
				assert.NotContains(t, res.Phases, importer.PhaseConvert)
				assert.Equal(t, int64(0), rc.ranges.Load()-before, "range requests for an image read whole")
			case c.decoded:
				// The probe and, for a qcow2, its tables by ranges (the L1
				// and one L2 table), then one GET for the stream: no
				// qemu-img.
				assert.False(t, res.ScratchUsed, "phases %v", res.Phases)
				assert.NotContains(t, res.Phases, importer.PhaseConvert)
				assert.Contains(t, res.Phases, importer.PhaseTransferDataFile)
				assert.LessOrEqual(t, rc.ranges.Load()-before, int64(3), "more range requests than the probe and the tables")
				assert.Equal(t, int64(1), rc.all.Load()-beforeAll-(rc.ranges.Load()-before), "not one streaming GET")
			default:
				assert.Contains(t, res.Phases, importer.PhaseConvert)
				assert.False(t, res.ScratchUsed, "phases %v", res.Phases)
				assert.NotContains(t, res.Phases, importer.PhaseTransferScratch)
				assert.Greater(t, rc.ranges.Load()-before, int64(0), "no range request reached the server")
			}
			expectImage(t, raw, o.Target, false)
			assertEmptyDir(t, o.ScratchDir)
			assertNoSocketDir(t, tmp)
		})
	}

	t.Run("opt-out", func(t *testing.T) {
		o := importer.Options{
			Source: srv.URL + "/disk.qcow2", Target: filepath.Join(t.TempDir(), "disk.img"),
			TargetOptions: importer.TargetOptions{
				ScratchDir:   t.TempDir(),
				NoRangedRead: true,
			}, Logger: testimg.Logger(t),
			Access: datasource.Access{
				Connections: 1,
			}, // and one GET: no range request at all
		}
		before := rc.ranges.Load()
		res, err := importer.Import(context.Background(), o)
		require.NoError(t, err)
		// Streamed whole instead, and decoded onto the target.
		assert.False(t, res.ScratchUsed)
		assert.NotContains(t, res.Phases, importer.PhaseConvert)
		assert.Equal(t, int64(0), rc.ranges.Load()-before, "no range request")
		expectImage(t, raw, o.Target, false)

		o.NoStreamDecode = true
		o.Target = filepath.Join(t.TempDir(), "disk.img")
		res, err = importer.Import(context.Background(), o)
		require.NoError(t, err)
		assert.True(t, res.ScratchUsed)
		expectImage(t, raw, o.Target, false)
	})
}

func TestRangedTruncatedImagesRefused(t *testing.T) {
	testimg.Need(t, "qemu-img")
	tmp := privateTmp(t)
	raw, www := rawAndWebRoot(t, imageSize, 12)
	for _, f := range []string{"qcow2", "vdi"} {
		p := testimg.Convert(t, raw, filepath.Join(www, "disk."+f), f)
		require.NoError(t, os.Truncate(p, testimg.FileSize(t, p)*2/3))
	}
	srv, rc := serveCountingRanges(t, www)
	for _, f := range []string{"qcow2", "vdi"} {
		t.Run(f, func(t *testing.T) {
			before := rc.ranges.Load()
			o := importer.Options{
				Source: srv.URL + "/disk." + f, Target: filepath.Join(t.TempDir(), "disk.img"),
				TargetOptions: importer.TargetOptions{
					ScratchDir: t.TempDir(),
				}, Logger: testimg.Logger(t),
			}
			res, err := importer.Import(context.Background(), o)
			require.Error(t, err)
			assert.ErrorIs(t, err, importer.ErrInvalidImage)
			// Our structural check said so, before qemu-img ran.
			assert.Contains(t, err.Error(), f+":")
			assert.Contains(t, err.Error(), "past the end")
			assert.NotContains(t, res.Phases, importer.PhaseConvert)
			assert.False(t, res.ScratchUsed)
			assert.Greater(t, rc.ranges.Load()-before, int64(0), "the check did not read over HTTP")
			assertEmptyDir(t, filepath.Dir(o.Target))
			assertNoSocketDir(t, tmp)
		})
	}
}

func TestRangedAuthTLSHeaders(t *testing.T) {
	testimg.Need(t, "qemu-img")
	raw, www := rawAndWebRoot(t, imageSize, 13)
	testimg.Convert(t, raw, filepath.Join(www, "disk.qcow2"), "qcow2")
	var denied atomic.Int64
	rc := &rangeCounter{h: http.FileServer(http.Dir(www))}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != "bob" || p != "hunter2" || r.Header.Get("X-Tenant") != "blue" {
			denied.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		rc.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	certDir := t.TempDir()
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	require.NoError(t, os.WriteFile(filepath.Join(certDir, "ca.crt"), b, 0o644))

	o := importer.Options{
		Source: srv.URL + "/disk.qcow2", Target: filepath.Join(t.TempDir(), "disk.img"),
		TargetOptions: importer.TargetOptions{
			ScratchDir:     t.TempDir(),
			NoStreamDecode: true,
		}, Logger: testimg.Logger(t),
		Access: datasource.Access{
			Username: "bob",
			Password: "hunter2",
			Headers:  []string{"X-Tenant: blue"},
			CertDir:  certDir,
		},
		// the ranged route's reads are the ones under test
	}
	res, err := importer.Import(context.Background(), o)
	require.NoError(t, err)
	assert.False(t, res.ScratchUsed, "phases %v", res.Phases)
	assert.Greater(t, rc.ranges.Load(), int64(0))
	assert.Zero(t, denied.Load(), "a request went out without credentials or headers")
	expectImage(t, raw, o.Target, false)
}

func TestRangedReadFailureNamesCause(t *testing.T) {
	testimg.Need(t, "qemu-img")
	raw, www := rawAndWebRoot(t, 24<<20, 14)
	testimg.Convert(t, raw, filepath.Join(www, "disk.vmdk"), "vmdk")
	fs := http.FileServer(http.Dir(www))
	var ranges atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The data past 1 MiB is gone: info and check pass, convert fails
		// (the image is larger than a read-ahead window starting at 0).
		var start int64
		if _, err := fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-", &start); err == nil && start >= 1<<20 {
			ranges.Add(1)
			http.Error(w, "gone", http.StatusNotFound)
			return
		}
		fs.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	o := importer.Options{
		Source: srv.URL + "/disk.vmdk", Target: filepath.Join(t.TempDir(), "disk.img"),
		TargetOptions: importer.TargetOptions{
			ScratchDir: t.TempDir(),
		}, Logger: testimg.Logger(t),
	}
	_, err := importer.Import(context.Background(), o)
	require.Error(t, err)
	assert.ErrorIs(t, err, importer.ErrSourceRefused)
	assert.True(t, strings.Contains(err.Error(), "404"), "error does not name the HTTP cause: %v", err)
	assert.Contains(t, err.Error(), "converting")
	assert.Positive(t, ranges.Load())
	assertEmptyDir(t, filepath.Dir(o.Target))
}

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
	raw, www := rawAndWebRoot(t, 24<<20, 31)
	testimg.Convert(t, raw, filepath.Join(www, "disk.qcow2"), "qcow2")
	padded := testimg.Convert(t, raw, filepath.Join(www, "padded.qcow2"), "qcow2")
	require.NoError(t, os.Truncate(padded, 4*testimg.FileSize(t, padded)))
	// The L1 table moves to the end when the disk outgrows it; the disk
	// then reads as the raw image followed by zeros.
	moved := testimg.Convert(t, raw, filepath.Join(www, "moved.qcow2"), "qcow2")
	testimg.Run(t, "qemu-img", "resize", "-q", "-f", "qcow2", moved, "1G")
	// Every cluster compressed: text only.
	text := filepath.Join(t.TempDir(), "text.raw")
	require.NoError(t, os.WriteFile(text, bytes.Repeat([]byte("all work and no play makes jack a dull boy.\n"), 8<<20/44+1)[:8<<20], 0o644))
	testimg.Run(t, "qemu-img", "convert", "-q", "-c", "-f", "raw", "-O", "qcow2", text, filepath.Join(www, "text.qcow2"))
	srv, rc := serveCountingRanges(t, www)

	loop := testimg.LoopDeviceIfRoot(t, t.TempDir(), 24<<20)
	cases := []struct {
		name, file string
		block      bool
		maxHeld    int64 // the decoder's buffer (0: its default)
		ranged     bool
	}{
		{"compact onto a file", "disk.qcow2", false, 0, false},
		{"compact onto a device", "disk.qcow2", true, 0, false},
		{"compressed onto a device", "text.qcow2", true, 0, false},
		{"padded onto a file", "padded.qcow2", false, 0, true},
		{"tables last, small buffer", "moved.qcow2", false, 1 << 20, true},
		{"tables last, default buffer", "moved.qcow2", false, 0, false},
		{"compressed onto a file", "text.qcow2", false, 0, false},
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
				}, Logger: testimg.Logger(t),
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

// replaceable serves one file's bytes with an ETag; replace swaps both.
type replaceable struct {
	mu     sync.Mutex
	data   []byte
	etag   string
	ranges atomic.Int64
	// afterRanges, when set, is called once, at the first range request
	// starting at or beyond from.
	from        int64
	afterRanges func()
	once        sync.Once
}

func (s *replaceable) replace(data []byte, etag string) {
	s.mu.Lock()
	s.data, s.etag = data, etag
	s.mu.Unlock()
}

func (s *replaceable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rg := r.Header.Get("Range"); rg != "" {
		s.ranges.Add(1)
		var start int64
		if _, err := fmt.Sscanf(rg, "bytes=%d-", &start); err == nil && start >= s.from && s.afterRanges != nil {
			s.once.Do(s.afterRanges)
		}
	}
	s.mu.Lock()
	data, etag := s.data, s.etag
	s.mu.Unlock()
	w.Header().Set("ETag", etag)
	http.ServeContent(w, r, "disk", time.Unix(1.7e9, 0), bytes.NewReader(data))
}

// TestParallelRangesImportByteForByte: raw, raw.zst and qcow2 (decoded as
// a stream) over a far mirror that paces each connection, read over
// several connections, land byte for byte.
func TestParallelRangesImportByteForByte(t *testing.T) {
	testimg.Need(t, "qemu-img", "zstd")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 32<<20, 7)
	files := map[string]string{
		"raw":     raw,
		"raw.zst": testimg.Compress(t, raw, "zst"),
		"qcow2":   testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2"),
	}
	for _, name := range []string{"raw", "raw.zst", "qcow2"} {
		for _, conns := range []int{3, 8} {
			t.Run(name, func(t *testing.T) {
				data, err := os.ReadFile(files[name])
				require.NoError(t, err)
				obj := &replaceable{data: data, etag: `"v1"`}
				s, err := farmirror.Start(obj, farmirror.Options{Rate: 64 << 20, FirstByte: 5 * time.Millisecond})
				require.NoError(t, err)
				t.Cleanup(func() { s.Close() })
				o := importer.Options{
					Source: s.URL + "/disk." + name, Target: filepath.Join(t.TempDir(), "disk.img"),
					TargetOptions: importer.TargetOptions{
						ScratchDir: t.TempDir(),
					}, Logger: testimg.Logger(t), Access: datasource.Access{
						Connections: conns,
					},
				}
				res, err := importer.Import(context.Background(), o)
				require.NoError(t, err)
				expectImage(t, raw, o.Target, false)
				assert.False(t, res.ScratchUsed)
				assert.NotContains(t, res.Phases, importer.PhaseConvert, "decoded as a stream")
				chunks := (int64(len(data)) + 4<<20 - 1) / (4 << 20)
				assert.GreaterOrEqual(t, obj.ranges.Load(), chunks-1, "every chunk after the first by a range request")
				// A worker may reuse another's idle keep-alive connection.
				assert.GreaterOrEqual(t, s.Connections.Load(), int64(2), "range requests on connections of their own")
				assert.Equal(t, 0, res.Retries)
			})
		}
	}
}

// TestParallelRangesObjectReplacedMidImport: an object replaced while its
// chunks are read is never mixed with the new one. Replaced while the
// first response (the old object) is still being read, it is read to its
// end alone; replaced after the reader left it, the import starts over and
// lands the new object whole.
func TestParallelRangesObjectReplacedMidImport(t *testing.T) {
	dir := t.TempDir()
	oldRaw := testimg.Raw(t, dir, "old.raw", 24<<20, 1)
	newRaw := testimg.Raw(t, dir, "new.raw", 24<<20, 2)
	oldData, err := os.ReadFile(oldRaw)
	require.NoError(t, err)
	newData, err := os.ReadFile(newRaw)
	require.NoError(t, err)
	for _, c := range []struct {
		name      string
		from      int64 // the object is replaced at the first range request from here
		want      string
		restarted bool
	}{
		{"before the first range", 0, oldRaw, false},
		// Over 4 connections a chunk k takes its buffer only once the
		// reader finished chunk k-4, and a connection asks for its next
		// chunk once its chunk is in: chunk 8 is asked for after the
		// reader left the first response (chunk 0). Replaced earlier, the
		// first response, still the old object, may be read to its end
		// alone, which is the first case.
		{"after ranges were read", 8 * datasource.DefaultChunkSize, newRaw, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj := &replaceable{data: oldData, etag: `"old"`, from: c.from}
			obj.afterRanges = func() { obj.replace(newData, `"new"`) }
			s, err := farmirror.Start(obj, farmirror.Options{Rate: 64 << 20})
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			o := importer.Options{
				Source: s.URL + "/disk.raw", Target: filepath.Join(t.TempDir(), "disk.img"),
				Logger: testimg.Logger(t), Access: datasource.Access{
					Connections:  4,
					RetryBackoff: time.Millisecond,
				},
			}
			res, err := importer.Import(context.Background(), o)
			require.NoError(t, err)
			expectImage(t, c.want, o.Target, false)
			if c.restarted {
				assert.GreaterOrEqual(t, res.Retries, 1, "the restart spent a retry")
			}
		})
	}
}

// rangeIgnoringServer advertises "Accept-Ranges: bytes" (and an ETag that
// pins the object) but answers every request, ranged or not, with 200 and
// the whole file, as some proxies and object stores do.
func rangeIgnoringServer(t *testing.T, path string, ranged *atomic.Int64) *httptest.Server {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" {
			ranged.Add(1)
		}
		w.Header().Set("Accept-Ranges", "bytes")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(data)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestRangedFallsBackWhenServerIgnoresRanges(t *testing.T) {
	testimg.Need(t, "qemu-img")
	tmp := privateTmp(t)
	dir := t.TempDir()
	raw, qcow := testimg.RawAndQCOW2(t, dir, imageSize, 31)
	var ranged atomic.Int64
	srv := rangeIgnoringServer(t, qcow, &ranged)

	var logs bytes.Buffer
	o := importer.Options{
		Source: srv.URL + "/disk.qcow2", Target: filepath.Join(t.TempDir(), "disk.img"),
		TargetOptions: importer.TargetOptions{
			ScratchDir: t.TempDir(),
		},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	res, err := importer.Import(context.Background(), o)
	t.Log(logs.String())
	require.NoError(t, err)
	assert.Equal(t, "qcow2", res.SourceFormat)
	// The stream that follows is decoded straight onto the target.
	assert.False(t, res.ScratchUsed, "phases %v", res.Phases)
	assert.Contains(t, res.Phases, importer.PhaseTransferDataFile)
	assert.NotContains(t, res.Phases, importer.PhaseConvert)
	assert.Greater(t, ranged.Load(), int64(0), "the engine did try a range")
	assert.Contains(t, logs.String(), "range read failed; reading the image as a stream instead")
	assert.Contains(t, logs.String(), "instead of 206 Partial Content", "the log says why")
	expectImage(t, raw, o.Target, false)
	assertEmptyDir(t, o.ScratchDir)
	assertNoSocketDir(t, tmp)
}
