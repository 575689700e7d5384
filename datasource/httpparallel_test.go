package datasource_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/internal/retry"
	"github.com/diskimport/engine/internal/testkit/bubblenet"
	"github.com/diskimport/engine/internal/testkit/farmirror"
	"github.com/diskimport/engine/internal/testkit/testpki"
)

const testChunk = 256 << 10

// object is an HTTP object with an ETag whose content can be replaced, and
// a record of the requests it answered.
type object struct {
	mu      sync.Mutex
	data    []byte
	etag    string
	ranges  []string    // Range header of each request, "" for none
	auth    []string    // Authorization header of each request
	onRange func(n int) // called with the count of range requests so far
}

func newObject(data []byte) *object { return &object{data: data, etag: `"v1"`} }

func (o *object) replace(data []byte, etag string) {
	o.mu.Lock()
	o.data, o.etag = data, etag
	o.mu.Unlock()
}

func (o *object) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	data, etag := o.data, o.etag
	o.ranges = append(o.ranges, r.Header.Get("Range"))
	o.auth = append(o.auth, r.Header.Get("Authorization"))
	n, hook := 0, o.onRange
	for _, rg := range o.ranges {
		if rg != "" {
			n++
		}
	}
	o.mu.Unlock()
	if hook != nil && r.Header.Get("Range") != "" {
		hook(n)
	}
	w.Header().Set("ETag", etag)
	http.ServeContent(w, r, "disk.img", time.Unix(1.7e9, 0), bytes.NewReader(data))
}

func (o *object) requests() (ranges, auth []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.ranges...), append([]string(nil), o.auth...)
}

func startMirror(t *testing.T, h http.Handler, o farmirror.Options) *farmirror.Server {
	t.Helper()
	s, err := farmirror.Start(h, o)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func parallelConfig(conns int) datasource.Config {
	return datasource.Config{Access: datasource.Access{Connections: conns, RetryBackoff: time.Millisecond}, ChunkSize: testChunk, Logger: testLogger()}
}

// TestParallelRangesDeliverTheObjectInOrder: over a paced mirror, any
// number of connections yields the object's bytes in order, over that
// many connections, and says it reads ahead; one connection is one GET.
func TestParallelRangesDeliverTheObjectInOrder(t *testing.T) {
	data := testImage(t, 3<<20+12345)
	for _, conns := range []int{1, 2, 4, 16} {
		t.Run(strconv.Itoa(conns), func(t *testing.T) {
			obj := newObject(data)
			s := startMirror(t, obj, farmirror.Options{Rate: 32 << 20, FirstByte: 2 * time.Millisecond})
			src, err := datasource.NewHTTP(s.URL+"/disk.img", parallelConfig(conns))
			require.NoError(t, err)
			st, got, err := readAll(t, src)
			require.NoError(t, err)
			assert.Equal(t, int64(len(data)), st.Size)
			assert.Equal(t, sha256.Sum256(data), sha256.Sum256(got))
			assert.Equal(t, conns > 1, st.ReadAhead, "the body reads ahead on connections of its own")
			ranges, _ := obj.requests()
			if conns == 1 {
				assert.Equal(t, []string{""}, ranges, "one connection is one GET")
				return
			}
			chunks := (len(data) + testChunk - 1) / testChunk
			assert.Len(t, ranges, chunks, "the first GET and one range request per further chunk")
			// A worker may reuse another's idle keep-alive connection.
			assert.GreaterOrEqual(t, s.Connections.Load(), int64(2), "range requests on connections of their own")
			assert.Equal(t, 0, retriesOf(src))
		})
	}
}

// TestParallelRangesLeaveASniffedHeadAlone: a reader that takes only the
// head (a format sniff, before an import reads over ranges) sends no
// range request.
func TestParallelRangesLeaveASniffedHeadAlone(t *testing.T) {
	obj := newObject(testImage(t, 4<<20))
	s := startMirror(t, obj, farmirror.Options{})
	src, err := datasource.NewHTTP(s.URL+"/disk.img", parallelConfig(8))
	require.NoError(t, err)
	st, err := src.Open(context.Background())
	require.NoError(t, err)
	_, err = io.ReadFull(st.Body, make([]byte, 64<<10))
	require.NoError(t, err)
	require.NoError(t, st.Body.Close())
	ranges, _ := obj.requests()
	assert.Equal(t, []string{""}, ranges)
}

// TestParallelRangesResumeOnlyTheDroppedChunk: a connection cut in the
// middle of a chunk is resumed at the first byte it did not deliver, and
// no other chunk is fetched twice.
func TestParallelRangesResumeOnlyTheDroppedChunk(t *testing.T) {
	data := testImage(t, 2<<20)
	obj := newObject(data)
	dropAt := int64(3 * testChunk)
	var dropped atomic.Bool
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") == fmt.Sprintf("bytes=%d-%d", dropAt, dropAt+testChunk-1) && !dropped.Swap(true) {
			obj.ServeHTTP(&cutWriter{ResponseWriter: w, left: testChunk / 3}, r)
			return
		}
		obj.ServeHTTP(w, r)
	})
	s := startMirror(t, h, farmirror.Options{})
	src, err := datasource.NewHTTP(s.URL+"/disk.img", parallelConfig(4))
	require.NoError(t, err)
	requireContent(t, src, data)
	require.True(t, dropped.Load())
	ranges, _ := obj.requests()
	seen := map[string]int{}
	for _, r := range ranges {
		seen[r]++
	}
	for r, n := range seen {
		assert.Equal(t, 1, n, "range %q requested once", r)
	}
	resumed := fmt.Sprintf("bytes=%d-%d", dropAt+testChunk/3, dropAt+testChunk-1)
	assert.Contains(t, seen, resumed, "the dropped chunk resumed where it broke")
	assert.Len(t, ranges, 2<<20/testChunk+1, "one request per chunk and one resume")
	assert.Equal(t, 1, retriesOf(src))
}

// TestParallelRangesRefuseAnObjectThatChanged: when the object is
// replaced mid-read, the chunks after it are refused (If-Range sends the
// first ETag) and the reader gets a *RestartError: what it read before is
// the first object's bytes, never the second's.
func TestParallelRangesRefuseAnObjectThatChanged(t *testing.T) {
	first, second := testImage(t, 2<<20), bytes.Repeat([]byte("new!"), 512<<10)
	obj := newObject(first)
	obj.onRange = func(n int) {
		if n == 3 {
			obj.replace(second, `"v2"`)
		}
	}
	s := startMirror(t, obj, farmirror.Options{})
	src, err := datasource.NewHTTP(s.URL+"/disk.img", parallelConfig(2))
	require.NoError(t, err)
	_, got, err := readAll(t, src)
	var re *datasource.RestartError
	require.ErrorAs(t, err, &re, "%v", err)
	assert.Contains(t, re.Reason, "the object changed")
	assert.Equal(t, first[:len(got)], got, "only the first object's bytes were delivered")
	assert.Less(t, len(got), len(first))
}

// TestParallelRangesFallBackToOneStream: a server that advertises ranges
// but answers every range request with the whole object is read over its
// first response alone.
func TestParallelRangesFallBackToOneStream(t *testing.T) {
	data := testImage(t, 2<<20)
	var requests atomic.Int32
	s := startMirror(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Accept-Ranges", "bytes")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Write(data)
	}), farmirror.Options{})
	src, err := datasource.NewHTTP(s.URL+"/disk.img", parallelConfig(4))
	require.NoError(t, err)
	st, got, err := readAll(t, src)
	require.NoError(t, err)
	assert.NotNil(t, st.Ranges)
	assert.Equal(t, sha256.Sum256(data), sha256.Sum256(got))
	assert.Greater(t, requests.Load(), int32(1), "range requests were tried")
}

// TestParallelRangesCredentialsOnlyToTheOrigin: basic auth goes with every
// range request to the URL's origin, and with none to the origin a
// redirect leads to.
func TestParallelRangesCredentialsOnlyToTheOrigin(t *testing.T) {
	data := testImage(t, 2<<20)
	want := "Basic " + basicToken("user", "pw")
	t.Run("same origin", func(t *testing.T) {
		obj := newObject(data)
		s := startMirror(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != want {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			obj.ServeHTTP(w, r)
		}), farmirror.Options{})
		cfg := parallelConfig(4)
		cfg.Username, cfg.Password = "user", "pw"
		src, err := datasource.NewHTTP(s.URL+"/disk.img", cfg)
		require.NoError(t, err)
		_, got, err := readAll(t, src)
		require.NoError(t, err)
		assert.Equal(t, sha256.Sum256(data), sha256.Sum256(got))
		ranges, auth := obj.requests()
		assert.Len(t, ranges, 2<<20/testChunk)
		for i, a := range auth {
			assert.Equal(t, want, a, "request %d (%s)", i, ranges[i])
		}
	})
	t.Run("redirected to another origin", func(t *testing.T) {
		obj := newObject(data)
		other := startMirror(t, obj, farmirror.Options{})
		front := startMirror(t, http.RedirectHandler(other.URL+"/disk.img", http.StatusFound), farmirror.Options{})
		cfg := parallelConfig(4)
		cfg.Username, cfg.Password = "user", "pw"
		src, err := datasource.NewHTTP(front.URL+"/disk.img", cfg)
		require.NoError(t, err)
		requireContent(t, src, data)
		ranges, auth := obj.requests()
		assert.Len(t, ranges, 2<<20/testChunk, "range requests go to the redirect's target")
		for i, a := range auth {
			assert.Empty(t, a, "request %d (%s) to the other origin", i, ranges[i])
		}
		assert.Equal(t, int64(1), front.Requests.Load(), "only the first GET went to the URL's origin")
	})
}

func basicToken(user, pass string) string {
	r, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
	r.SetBasicAuth(user, pass)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

// TestParallelRangesCancelledMidRead: cancelling the context ends a read
// in progress with the cancellation, not a partial success.
func TestParallelRangesCancelledMidRead(t *testing.T) {
	obj := newObject(testImage(t, 4<<20))
	s := startMirror(t, obj, farmirror.Options{Rate: 8 << 20})
	src, err := datasource.NewHTTP(s.URL+"/disk.img", parallelConfig(4))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := src.Open(ctx)
	require.NoError(t, err)
	defer st.Body.Close()
	_, err = io.ReadFull(st.Body, make([]byte, testChunk+1000))
	require.NoError(t, err)
	cancel()
	_, err = io.Copy(io.Discard, st.Body)
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.Canceled), "%v", err)
}

// TestParallelRangesConnectThroughTheEgressPolicy: every connection of a
// parallel read is dialled by the egress policy's dialer.
func TestParallelRangesConnectThroughTheEgressPolicy(t *testing.T) {
	data := testImage(t, 2<<20)
	s := startMirror(t, newObject(data), farmirror.Options{})
	var connects atomic.Int64
	p := &datasource.EgressPolicy{Allow: mustParseEgress(t, "127.0.0.1"), Dialer: &net.Dialer{
		Timeout: 5 * time.Second,
		Control: func(string, string, syscall.RawConn) error { connects.Add(1); return nil },
	}}
	cfg := parallelConfig(4)
	cfg.Egress = p
	src, err := datasource.NewHTTP(s.URL+"/disk.img", cfg)
	require.NoError(t, err)
	requireContent(t, src, data)
	// Keep-alive connections may be reused: at least one besides the first.
	assert.GreaterOrEqual(t, s.Connections.Load(), int64(2), "the first GET and range connections")
	assert.Equal(t, s.Connections.Load(), connects.Load(), "every connection went through the policy")
}

func mustParseEgress(t *testing.T, list string) []netip.Prefix {
	t.Helper()
	p, err := datasource.ParseEgressList(list)
	require.NoError(t, err)
	return p
}

// TestParallelRangesUseConnectionsOfTheirOwnOverTLS: against an https
// server that speaks HTTP/2, the range requests still go over HTTP/1.1
// connections of their own (HTTP/2 would multiplex them onto one TCP
// connection, which is what a far link limits).
func TestParallelRangesUseConnectionsOfTheirOwnOverTLS(t *testing.T) {
	ca := testpki.NewCA(t, t.TempDir(), "h2-test")
	pair := ca.Server("127.0.0.1")
	cert, err := tls.LoadX509KeyPair(pair.CertFile, pair.KeyFile)
	require.NoError(t, err)
	data := testImage(t, 2<<20)
	obj := newObject(data)
	var mu sync.Mutex
	protos := map[string]int{}
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" {
			mu.Lock()
			protos[r.Proto]++
			mu.Unlock()
		}
		obj.ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	certDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(certDir, "ca.pem"), ca.PEM, 0o644))
	cfg := parallelConfig(4)
	cfg.CertDir = certDir
	src, err := datasource.NewHTTP(srv.URL+"/disk.img", cfg)
	require.NoError(t, err)
	requireContent(t, src, data)
	assert.Equal(t, map[string]int{"HTTP/1.1": 2<<20/testChunk - 1}, protos)
	assert.GreaterOrEqual(t, conns.Load(), int64(3), "the first GET and range connections")
}

// TestParallelRangesCutTheLastRoundAcrossConnections: the bytes after the
// whole rounds of chunks go as one smaller piece per connection, and the
// object still arrives exact and in order.
func TestParallelRangesCutTheLastRoundAcrossConnections(t *testing.T) {
	const conns = 4
	data := testImage(t, 2*conns*testChunk+700<<10)
	obj := newObject(data)
	s := startMirror(t, obj, farmirror.Options{Rate: 32 << 20, FirstByte: 2 * time.Millisecond})
	src, err := datasource.NewHTTP(s.URL+"/disk.img", parallelConfig(conns))
	require.NoError(t, err)
	requireContent(t, src, data)
	ranges, _ := obj.requests()
	require.Equal(t, "", ranges[0], "the first GET")
	spans := map[int64]int64{}
	for _, rg := range ranges[1:] {
		var from, to int64
		_, err := fmt.Sscanf(rg, "bytes=%d-%d", &from, &to)
		require.NoError(t, err, rg)
		spans[from] = to + 1 - from
	}
	var pieces []int64
	for at := int64(testChunk); at < int64(len(data)); {
		n, ok := spans[at]
		require.True(t, ok, "a range starts at %d", at)
		if at >= 2*conns*testChunk {
			pieces = append(pieces, n)
		}
		at += n
	}
	assert.Len(t, spans, 2*conns-1+3, "whole chunks after the first, then three pieces")
	assert.Equal(t, []int64{238934, 238934, 238932}, pieces, "700 KiB cut in three: no more pieces than it has 256 KiB")
}

// TestParallelRangesFallToTheConnectionsTheServerAccepts: a server that
// refuses every request beyond three at once with 503 (nginx's
// limit_conn) still delivers the object exactly: the refused connections
// hand their chunks back and leave, the others go on; a single connection
// would never have been refused.
func TestParallelRangesFallToTheConnectionsTheServerAccepts(t *testing.T) {
	data := testImage(t, 8<<20)
	obj := newObject(data)
	var inflight, peak, refused atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		if n > 3 {
			refused.Add(1)
			http.Error(w, "too many connections", http.StatusServiceUnavailable)
			return
		}
		for m := peak.Load(); n > m && !peak.CompareAndSwap(m, n); m = peak.Load() {
		}
		obj.ServeHTTP(w, r)
	})
	s := startMirror(t, h, farmirror.Options{Rate: 4 << 20, FirstByte: 5 * time.Millisecond})
	src, err := datasource.NewHTTP(s.URL+"/disk.img", parallelConfig(16))
	require.NoError(t, err)
	requireContent(t, src, data)
	assert.Positive(t, refused.Load(), "the server refused connections beyond its limit")
	assert.Equal(t, int64(3), peak.Load(), "three requests served at once")
	ranges, _ := obj.requests()
	assert.Len(t, ranges, len(data)/testChunk, "each chunk served once: the first GET and one range request per further chunk")
}

// outageServer serves an object's ranges slowly (32 KiB every 2 ms, so
// that every connection is mid-answer) and, at the range requests numbered
// in cutAt, cuts every connection it holds at once, halfway through that
// answer: one outage of the server or the link. The second cut waits past
// retry.OutageWindow, so it is another outage.
type outageServer struct {
	data  []byte
	cutAt map[int64]bool

	mu     sync.Mutex
	conns  map[net.Conn]bool
	ranges atomic.Int64
	cuts   atomic.Int64
}

func (s *outageServer) connState(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.conns[c] = true
	case http.StateClosed, http.StateHijacked:
		delete(s.conns, c)
	}
}

func (s *outageServer) cutAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close()
	}
}

func (s *outageServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Range") == "" {
		http.ServeContent(w, r, "disk", time.Unix(1.7e9, 0), bytes.NewReader(s.data))
		return
	}
	cut := s.cutAt[s.ranges.Add(1)]
	var start, end int64
	fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-%d", &start, &end)
	w.Header().Set("Last-Modified", time.Unix(1.7e9, 0).UTC().Format(http.TimeFormat))
	w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, end, len(s.data)))
	w.Header().Set("Content-Length", strconv.FormatInt(end-start+1, 10))
	w.WriteHeader(http.StatusPartialContent)
	part := s.data[start : end+1]
	for i := 0; i < len(part); i += 32 << 10 {
		if cut && i >= len(part)/2 {
			if s.cuts.Add(1) > 1 {
				time.Sleep(retry.OutageWindow + 200*time.Millisecond)
			}
			s.cutAll()
			return
		}
		if _, err := w.Write(part[i:min(i+32<<10, len(part))]); err != nil {
			return
		}
		w.(http.Flusher).Flush()
		time.Sleep(2 * time.Millisecond)
	}
}

// TestParallelRangesCountAnOutageOnce: an outage that cuts every
// connection at once costs the source one retry, not one per connection,
// so two brief outages do not fail an 8-connection read that one
// connection would complete with 2 retries. Before, each outage cost a
// retry per connection and the read failed with its 4 spent.
// In a bubble, the server's pacing and the pause between the outages are
// the bubble's time: every connection is mid-answer at a cut, and the
// second outage lies past the window, on any machine.
func TestParallelRangesCountAnOutageOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		data := testImage(t, 32*testChunk)
		s := &outageServer{data: data, cutAt: map[int64]bool{6: true, 20: true}, conns: map[net.Conn]bool{}}
		tr := bubblenet.Serve(t, &http.Server{Handler: s, ConnState: s.connState})
		cfg := parallelConfig(8)
		cfg.Transport = tr
		cfg.Retries = 4
		src, err := datasource.NewHTTP(bubblenet.URL+"/disk.img", cfg)
		require.NoError(t, err)
		_, got, err := readAll(t, src)
		require.NoError(t, err)
		assert.Equal(t, sha256.Sum256(data), sha256.Sum256(got))
		assert.EqualValues(t, 2, s.cuts.Load(), "both outages happened")
		assert.LessOrEqual(t, retriesOf(src), 4)
	})
}
