package datasource

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testkit/cgrouptest"
)

// TestRangeConnectionsFollowTheCPUAndTheLink: a count the user set is
// taken as it is; by default a far link (a slow first answer, or one not
// measured) keeps DefaultConnections whatever the CPU, a near link (this
// machine, or a first answer within nearLinkWait) keeps them with two CPUs
// or more and is one GET with less, as in a pod under CDI's 750m limit.
func TestRangeConnectionsFollowTheCPUAndTheLink(t *testing.T) {
	loopback := linkFacts{loopback: true}
	podNetwork := linkFacts{wait: 800 * time.Microsecond}
	edgeOfNear := linkFacts{wait: nearLinkWait}
	farMirror := linkFacts{wait: 30 * time.Millisecond}
	unmeasured := linkFacts{}
	slowLoopback := linkFacts{loopback: true, wait: 40 * time.Millisecond} // a throttled process, a busy server
	for _, tc := range []struct {
		name  string
		asked int
		cores float64
		link  linkFacts
		want  int
		why   string
	}{
		{"750m, this machine", 0, 0.75, loopback, 1, "near link, scarce CPU"},
		{"750m, a pod network", 0, 0.75, podNetwork, 1, "near link, scarce CPU"},
		{"750m, a first answer at the threshold", 0, 0.75, edgeOfNear, 1, "near link, scarce CPU"},
		{"1.9 CPUs, this machine", 0, 1.9, loopback, 1, "near link, scarce CPU"},
		{"a slow answer from this machine is still near", 0, 0.5, slowLoopback, 1, "near link, scarce CPU"},
		{"750m, a far mirror", 0, 0.75, farMirror, DefaultConnections, "far link"},
		{"750m, a link not measured", 0, 0.75, unmeasured, DefaultConnections, "far link"},
		{"two CPUs, this machine", 0, 2, loopback, DefaultConnections, "near link, CPU to spare"},
		{"eight CPUs, a pod network", 0, 8, podNetwork, DefaultConnections, "near link, CPU to spare"},
		{"eight CPUs, a far mirror", 0, 8, farMirror, DefaultConnections, "far link"},
		{"asked 16 at 750m on this machine", 16, 0.75, loopback, 16, "asked"},
		{"asked 4 at 750m on a pod network", 4, 0.75, podNetwork, 4, "asked"},
		{"asked 1 on a far mirror", 1, 8, farMirror, 1, "asked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, why := rangeConnections(tc.asked, tc.cores, tc.link)
			assert.Equal(t, tc.want, n)
			assert.Equal(t, tc.why, why)
		})
	}
}

// TestLoopbackHostsAreThisMachine: the hosts a near link is known by from
// the URL alone.
func TestLoopbackHostsAreThisMachine(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.3.4.5": true, "::1": true, "localhost": true, "LocalHost": true,
		"img.localhost": false, "10.0.0.7": false, "192.0.2.2": false, "fd00::2": false, "example.com": false, "localhost.example.com": false,
	} {
		assert.Equal(t, want, isLoopbackHost(host), host)
	}
}

// rangeServer serves data with an ETag on ln after delay, counting the
// range requests it answers.
func rangeServer(t *testing.T, ln net.Listener, data []byte, delay time.Duration) (obj string, ranges *atomic.Int64) {
	t.Helper()
	ranges = new(atomic.Int64)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" {
			ranges.Add(1)
		}
		time.Sleep(delay)
		w.Header().Set("ETag", `"x"`)
		http.ServeContent(w, r, "d", time.Unix(1.7e9, 0), bytes.NewReader(data))
	}))
	if ln != nil {
		srv.Listener.Close()
		srv.Listener = ln
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL + "/disk.img", ranges
}

// openWith opens obj as a source of o whose process may use cores CPUs,
// reads it whole and checks its bytes; it returns the Transfer and the
// first answer's wait as measured.
func openWith(t *testing.T, obj string, o Config, cores float64, data []byte) (*Transfer, time.Duration) {
	t.Helper()
	src, err := NewHTTP(obj, o)
	require.NoError(t, err)
	hs := src.(*httpSource)
	if o.Connections == 0 {
		hs.cores = cores
	}
	st, err := src.Open(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { st.Body.Close() })
	first, _ := st.Body.(*httpBody)
	if p, ok := st.Body.(*parallelBody); ok {
		first = p.first
	}
	require.NotNil(t, first)
	wait := first.cur.wait
	got, err := io.ReadAll(st.Body)
	require.NoError(t, err)
	assert.Equal(t, sha256.Sum256(data), sha256.Sum256(got))
	return st, wait
}

// TestOpenDecidesTheConnectionsFromTheCPUAndTheLink: an object on this
// machine is one GET by default with 0.75 CPUs and over several
// connections with two, or when the user asked for them; an object whose
// server answers 30 ms after the request, on an address of this machine
// that is not loopback, is a far link: several connections with 0.75
// CPUs, its first answer's wait measured.
func TestOpenDecidesTheConnectionsFromTheCPUAndTheLink(t *testing.T) {
	data := make([]byte, 3<<20+4321)
	_, _ = rand.Read(data)
	const chunk = 256 << 10
	cfg := func(conns int) Config {
		// No proxy from the environment for the address that is not
		// loopback: the wait is the server's.
		noProxy := func(*http.Request) (*url.URL, error) { return nil, nil }
		return Config{Access: Access{Connections: conns, RetryBackoff: time.Millisecond}, ChunkSize: chunk, Proxy: noProxy}
	}
	for _, tc := range []struct {
		name     string
		conns    int
		cores    float64
		parallel bool
	}{
		{"750m: one GET", 0, 0.75, false},
		{"two CPUs: several connections", 0, 2, true},
		{"750m, asked for 4: several connections", 4, 0.75, true},
	} {
		t.Run("this machine, "+tc.name, func(t *testing.T) {
			obj, ranges := rangeServer(t, nil, data, 0)
			st, _ := openWith(t, obj, cfg(tc.conns), tc.cores, data)
			assert.Equal(t, tc.parallel, st.ReadAhead)
			assert.Equal(t, tc.parallel, ranges.Load() > 0, "range requests")
		})
	}
	t.Run("a far server, 750m: several connections", func(t *testing.T) {
		ip := nonLoopbackAddr(t)
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		require.NoError(t, err)
		const delay = 30 * time.Millisecond
		obj, ranges := rangeServer(t, ln, data, delay)
		st, wait := openWith(t, obj, cfg(0), 0.75, data)
		assert.GreaterOrEqual(t, wait, delay, "the first answer's wait, measured")
		assert.True(t, st.ReadAhead)
		assert.Positive(t, ranges.Load(), "range requests")
	})
}

// TestRangeChunkSizeFollowsTheLink: a size the user set is taken as it
// is; by default a near link's ranges are NearChunkSize (its first bytes
// come at once, so smaller chunks hold less memory for the same speed)
// and a far or unmeasured link's DefaultChunkSize.
func TestRangeChunkSizeFollowsTheLink(t *testing.T) {
	for _, tc := range []struct {
		name  string
		asked int64
		link  linkFacts
		want  int64
	}{
		{"this machine", 0, linkFacts{loopback: true}, NearChunkSize},
		{"a pod network", 0, linkFacts{wait: 800 * time.Microsecond}, NearChunkSize},
		{"a far mirror", 0, linkFacts{wait: 30 * time.Millisecond}, DefaultChunkSize},
		{"a link not measured", 0, linkFacts{}, DefaultChunkSize},
		{"asked 256 KiB on this machine", 256 << 10, linkFacts{loopback: true}, 256 << 10},
		{"asked 8 MiB on a far mirror", 8 << 20, linkFacts{wait: 30 * time.Millisecond}, 8 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, rangeChunkSize(tc.asked, tc.link))
		})
	}
}

// TestOpenReadsANearObjectInNearChunks: an object on this machine read
// over several connections by default asks for NearChunkSize ranges,
// and for the size the user set when set; its bytes arrive whole.
func TestOpenReadsANearObjectInNearChunks(t *testing.T) {
	// Whole rounds of near chunks on the sixteen connections: no tail cut
	// into pieces (chunkPlan), so every range is one chunk.
	data := make([]byte, 2*DefaultConnections*NearChunkSize)
	_, _ = rand.Read(data)
	for _, tc := range []struct {
		name  string
		asked int64
		want  int64
	}{
		{"by default", 0, NearChunkSize},
		{"asked 256 KiB", 256 << 10, 256 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj, ranges := rangeServer(t, nil, data, 0)
			st, _ := openWith(t, obj, Config{Access: Access{RetryBackoff: time.Millisecond}, ChunkSize: tc.asked}, 2, data)
			p, ok := st.Body.(*parallelBody)
			require.True(t, ok, "read over several connections")
			assert.Equal(t, tc.want, p.chunk)
			assert.Equal(t, int64(len(data))/tc.want-1, ranges.Load(), "range requests after the first answer's chunk")
		})
	}
}

// nonLoopbackAddr is an address of this machine's that is not loopback,
// or skips the test.
func nonLoopbackAddr(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Skip("no address but loopback")
	return ""
}

// TestDefaultConnectionsInsideACPUQuota: the test binary run again in a
// cgroup with CDI's 750m quota reads an object served on 127.0.0.1 by
// default as one GET, and outside the quota over several connections
// (this process's CPUs, when two or more); the CPU is read from the
// cgroup itself (cpulimit), nothing injected.
func TestDefaultConnectionsInsideACPUQuota(t *testing.T) {
	if cgrouptest.InChild() {
		data := make([]byte, 3<<20+4321)
		_, _ = rand.Read(data)
		obj, ranges := rangeServer(t, nil, data, 0)
		src, err := NewHTTP(obj, Config{ChunkSize: 256 << 10})
		require.NoError(t, err)
		st, err := src.Open(context.Background())
		require.NoError(t, err)
		got, err := io.ReadAll(st.Body)
		require.NoError(t, err)
		require.NoError(t, st.Body.Close())
		require.Equal(t, data, got)
		fmt.Printf("readahead=%v ranges=%d\n", st.ReadAhead, ranges.Load())
		return
	}
	quota := cgrouptest.NewQuota(t, 75000, 100000)
	out := cgrouptest.RunTest(t, quota, t.Name())
	assert.Contains(t, out, "readahead=false ranges=0\n", "inside the 750m quota: one GET")
	src, err := NewHTTP("http://127.0.0.1/", Config{})
	require.NoError(t, err)
	if src.(*httpSource).cores < scarceCores {
		t.Skip("this process has less than two CPUs itself")
	}
	out = cgrouptest.RunTest(t, "", t.Name())
	assert.Contains(t, out, "readahead=true", "outside it: several connections")
	assert.False(t, strings.Contains(out, "ranges=0\n"), "range requests outside the quota: %s", out)
}
