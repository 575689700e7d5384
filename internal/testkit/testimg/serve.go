package testimg

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// Serve serves dir on 127.0.0.1 and returns the base URL (ending in /).
func Serve(t testing.TB, dir string) string {
	t.Helper()
	base, _ := ServeCountingRanges(t, dir)
	return base
}

// ServeCountingRanges is Serve, counting the requests that carry a Range
// header: how a test tells that an image was read in place over ranges,
// or not at all.
func ServeCountingRanges(t testing.TB, dir string) (base string, ranges *atomic.Int64) {
	t.Helper()
	ranges = new(atomic.Int64)
	files := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" {
			ranges.Add(1)
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/", ranges
}

// CountingTransport passes requests to Next and counts them, to show that
// a caller's transport carried an import's requests.
type CountingTransport struct {
	Next http.RoundTripper
	N    atomic.Int64
}

func (c *CountingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.N.Add(1)
	return c.Next.RoundTrip(r)
}

// ServeOn serves h on ip (a 127.0.0.x alias, say) at a port the OS picks
// until the test ends, and counts the connections it accepts. It returns
// host:port.
func ServeOn(t testing.TB, ip string, h http.Handler) (addr string, conns *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	conns = new(atomic.Int32)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), conns
}

// ServerOn is an httptest server of h on host (an address of the loopback
// network such as 127.0.0.2: another host than 127.0.0.1 to an HTTP
// client) at a port the OS picks, closed when the test ends.
func ServerOn(t testing.TB, host string, h http.Handler) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}
