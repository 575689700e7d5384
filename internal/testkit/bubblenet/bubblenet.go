// Package bubblenet is an in-memory network for tests that run client and
// server in one testing/synctest bubble, as net/http's own tests do. Every
// wait on its connections (net.Pipe) is a wait the bubble sees, so the
// bubble's fake clock drives stall timers, retry delays and a handler's
// own sleeps, and a test's durations are exact whatever the machine's
// load. A real loopback server cannot do that: a goroutine blocked in a
// socket read keeps the fake clock still.
package bubblenet

import (
	"context"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// URL is the address HTTP serves at; any host of an http:// URL reaches
// the same server, since Transport dials the server whatever the address.
const URL = "http://bubble.test"

// HTTP serves h inside the caller's bubble and returns the transport that
// reaches it, as Serve does.
func HTTP(t testing.TB, h http.Handler) *http.Transport {
	t.Helper()
	return Serve(t, &http.Server{Handler: h})
}

// Serve runs srv (its handler and hooks as the caller set them) inside the
// caller's bubble and returns the transport that reaches it (over a new
// net.Pipe per connection; it asks for no compression, so bytes arrive as
// served). The server and the transport's idle connections are closed at
// cleanup, which synctest runs inside the bubble, and the cleanup waits
// for the handlers still running to return (the bubble's clock stops once
// its test function returned, so a handler that sleeps would otherwise
// never wake); a goroutine either side leaked fails the test.
func Serve(t testing.TB, srv *http.Server) *http.Transport {
	t.Helper()
	var handlers sync.WaitGroup
	h := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handlers.Add(1)
		defer handlers.Done()
		h.ServeHTTP(w, r)
	})
	l := NewListener()
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(l)
	}()
	tr := &http.Transport{DialContext: l.DialContext, DisableCompression: true}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = srv.Close()
		<-served
		handlers.Wait()
	})
	return tr
}

// Listener hands the server end of each net.Pipe its DialContext made to
// Accept.
type Listener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// NewListener returns a Listener; Close it when done.
func NewListener() *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept returns the next dialled connection's server end.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close ends Accept and every later DialContext.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is a fixed address: the pipe has no other.
func (l *Listener) Addr() net.Addr { return pipeAddr{} }

// DialContext connects to the listener, whatever network and address it is
// given, once Accept takes the connection.
func (l *Listener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
	case <-ctx.Done():
	}
	client.Close()
	server.Close()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, net.ErrClosed
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "bubble.test:80" }

// Goroutines counts the goroutines in the caller's synctest bubble (the
// caller among them). runtime.NumGoroutine counts the whole process, so a
// goroutine another test left ending outside the bubble moved a leak
// check's count (CI once saw 6 before, 7 after, with nothing leaked).
func Goroutines(t testing.TB) int {
	t.Helper()
	self := make([]byte, 256)
	self = self[:runtime.Stack(self, false)]
	mark := bubbleMark(self)
	if mark == "" {
		t.Fatalf("bubblenet.Goroutines called outside a synctest bubble")
	}
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for line := range strings.Lines(string(buf)) {
		if strings.HasPrefix(line, "goroutine ") && bubbleMark([]byte(line)) == mark {
			count++
		}
	}
	return count
}

// bubbleID matches the bubble a goroutine's header line names, as the
// runtime prints it: "goroutine 7 [select (durable), synctest bubble 1]:".
var bubbleID = regexp.MustCompile(`^goroutine \d+ \[[^\n]*, synctest bubble (\d+)`)

// bubbleMark returns the bubble named in stack's first line, or "" for a
// goroutine outside any bubble.
func bubbleMark(stack []byte) string {
	m := bubbleID.FindSubmatch(stack)
	if m == nil {
		return ""
	}
	return string(m[1])
}
