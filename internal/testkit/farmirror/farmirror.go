// Package farmirror serves HTTP on 127.0.0.1 the way a far or busy mirror
// looks to a client: every connection is paced to a fixed rate and every
// response waits a fixed time before its first byte. This machine's kernel
// has no netem and no fq qdisc, and tbf/htb shape only in aggregate, so the
// server does it itself. Tests and the benchmarks (benchtool farmirror) use
// it; it is not part of the engine.
package farmirror

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/diskimport/engine/internal/retry"
)

// Options shape a mirror. The zero value is an unshaped server (Go's
// server, with sendfile for files).
type Options struct {
	// Rate caps each connection at this many bytes per second (0: no cap).
	// A connection earns no credit while idle: each response starts on a
	// fresh schedule, so a keep-alive connection reused later sends at the
	// same rate, not with a burst.
	Rate int64
	// FirstByte delays every response's header by this long (a far
	// mirror's round trip and its time to first byte).
	FirstByte time.Duration
}

// Server is a running mirror. Its counters may be read while it serves.
type Server struct {
	URL         string // http://127.0.0.1:PORT
	Connections atomic.Int64
	Requests    atomic.Int64

	srv  *http.Server
	done chan error
}

type pacerKey struct{}

// Start serves h on a new 127.0.0.1 port, shaped by o, until Close.
func Start(h http.Handler, o Options) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String(), done: make(chan error, 1)}
	s.srv = &http.Server{
		Handler:           s.shape(h, o),
		ReadHeaderTimeout: time.Minute,
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			s.Connections.Add(1)
			return context.WithValue(ctx, pacerKey{}, &pacer{rate: o.Rate})
		},
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server and drops every connection.
func (s *Server) Close() error {
	err := s.srv.Close()
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

func (s *Server) shape(h http.Handler, o Options) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Requests.Add(1)
		if o.FirstByte > 0 {
			if retry.Sleep(r.Context(), o.FirstByte) != nil {
				return
			}
		}
		if o.Rate <= 0 {
			h.ServeHTTP(w, r)
			return
		}
		p := r.Context().Value(pacerKey{}).(*pacer)
		p.restart()
		h.ServeHTTP(&pacedWriter{ResponseWriter: w, p: p, ctx: r.Context()}, r)
	})
}

// catchUp is how far behind its schedule a response may fall and still
// make it good: timer oversleeps and scheduling delays on a loaded
// machine. Without it one connection paced at 8 MB/s averaged 6.9 MB/s
// here (load average 16 on 2 cores).
const catchUp = 250 * time.Millisecond

// pacer is one connection's schedule: the time its next byte may leave.
type pacer struct {
	rate int64
	mu   sync.Mutex
	next time.Time
}

// restart begins a response's schedule now.
func (p *pacer) restart() {
	p.mu.Lock()
	p.next = time.Now()
	p.mu.Unlock()
}

// wait sleeps until n more bytes may be sent.
func (p *pacer) wait(ctx context.Context, n int) error {
	p.mu.Lock()
	now := time.Now()
	if p.next.Before(now.Add(-catchUp)) {
		p.next = now.Add(-catchUp)
	}
	at := p.next
	p.next = p.next.Add(time.Duration(int64(n) * int64(time.Second) / p.rate))
	p.mu.Unlock()
	d := time.Until(at)
	if d <= 0 {
		return nil
	}
	return retry.Sleep(ctx, d)
}

// pacedWriter sends a response in small slices, each when its pacer
// allows, flushed at once so the bytes leave at the pace.
type pacedWriter struct {
	http.ResponseWriter
	p   *pacer
	ctx context.Context
}

// slice is how many bytes leave at once: 4 ms at 8 MB/s.
const slice = 32 << 10

func (w *pacedWriter) Write(b []byte) (int, error) {
	done := 0
	for done < len(b) {
		n := min(len(b)-done, slice)
		if err := w.p.wait(w.ctx, n); err != nil {
			return done, err
		}
		k, err := w.ResponseWriter.Write(b[done : done+n])
		done += k
		if err != nil {
			return done, err
		}
		if f, ok := w.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
	}
	return done, nil
}
