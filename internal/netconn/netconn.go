// Package netconn holds the engine's one way to cut the system calls of a
// bulk TLS stream over TCP: a connection that gathers full TLS records
// into large writes (Coalesce, for a sender), and connections that read
// through a large buffer (BufferedReads for a server's, BufferedDialer
// for a client's).
//
// crypto/tls writes each record, at most 16 KiB of plaintext, with a
// write of its own, and reads about one record per read: a 2 GiB clone
// is some 131,000 of each, and on a 2-core machine the cloner spent 39 %
// of its CPU in its socket writes and the upload server 29 % in its
// socket reads (perf, fully written 2 GiB block clone over 127.0.0.1 with
// mutual TLS). Gathered into 256 KiB writes and read 256 KiB at a time,
// the clone's two halves spent 5.6 CPU-seconds instead of 6.3 (medians of
// 3 interleaved rounds, bench/clone.sh).
package netconn

import (
	"bufio"
	"context"
	"net"
	"sync"
	"time"
)

const (
	// BufferSize is the most a coalescing write gathers and a buffered
	// read takes in one system call.
	BufferSize = 256 << 10
	// fullRecord: a write at least this long is a full TLS record of a
	// bulk stream (16 KiB of plaintext and its framing) and is gathered;
	// a shorter one (a handshake message, a request's head, a stream's
	// last record) goes out at once, with what was gathered before it.
	fullRecord = 16 << 10
	// gatherWait bounds how long gathered bytes wait for more: a full
	// record that is the last before its writer waits for an answer
	// still leaves within it.
	gatherWait = time.Millisecond
)

// Dialer is the signature of http.Transport's DialContext.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// CoalescingDialer returns dial's connections coalescing their writes.
func CoalescingDialer(dial Dialer) Dialer {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return Coalesce(c), nil
	}
}

// coalescingConn gathers full records and writes them with what follows.
type coalescingConn struct {
	net.Conn
	mu    sync.Mutex
	buf   []byte
	timer *time.Timer
	armed bool
	err   error // sticky: the first failed write
}

// Coalesce returns c with its writes gathered: a write of a full TLS
// record is kept until BufferSize is gathered, a shorter write comes, or
// gatherWait passes, whichever is first; order is kept and every byte
// written leaves within gatherWait. A failed write fails every later one.
func Coalesce(c net.Conn) net.Conn {
	cc := &coalescingConn{Conn: c, buf: make([]byte, 0, BufferSize)}
	cc.timer = time.AfterFunc(time.Hour, cc.flushGathered)
	cc.timer.Stop()
	return cc
}

func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if len(p) >= fullRecord && len(c.buf)+len(p) <= cap(c.buf) {
		c.buf = append(c.buf, p...)
		if !c.armed {
			c.armed = true
			c.timer.Reset(gatherWait)
		}
		return len(p), nil
	}
	if c.armed {
		c.timer.Stop()
		c.armed = false
	}
	if len(c.buf) == 0 {
		n, err := c.Conn.Write(p)
		c.err = err
		return n, err
	}
	bufs := net.Buffers{c.buf, p}
	gathered := int64(len(c.buf))
	n, err := bufs.WriteTo(c.Conn)
	c.buf = c.buf[:0]
	c.err = err
	return int(max(0, n-gathered)), err
}

// flushGathered writes what waited gatherWait.
func (c *coalescingConn) flushGathered() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.armed {
		return // a write took the bytes meanwhile
	}
	c.armed = false
	c.writeGathered()
}

// writeGathered writes what was gathered, unless a write failed before;
// c.mu is held.
func (c *coalescingConn) writeGathered() {
	if len(c.buf) > 0 && c.err == nil {
		_, c.err = c.Conn.Write(c.buf)
	}
	c.buf = c.buf[:0]
}

// Close writes what was gathered, then closes the connection.
func (c *coalescingConn) Close() error {
	c.mu.Lock()
	if c.armed {
		c.timer.Stop()
		c.armed = false
	}
	c.writeGathered()
	c.mu.Unlock()
	return c.Conn.Close()
}

// BufferedReads returns ln with each accepted connection read through a
// buffer of BufferSize bytes.
func BufferedReads(ln net.Listener) net.Listener { return bufferedListener{ln} }

type bufferedListener struct{ net.Listener }

func (l bufferedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newBufferedConn(c, BufferSize), nil
}

// BufferedDialer returns dial's connections read through a buffer of size
// bytes, for a client whose TLS reads a record per call (an HTTPS
// download). A read of at least size bytes that finds the buffer empty
// goes straight into the caller's buffer, so a plain HTTP body read in
// large pieces pays no copy for it.
func BufferedDialer(dial Dialer, size int) Dialer {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return newBufferedConn(c, size), nil
	}
}

// bufferedConn reads c through a buffer.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func newBufferedConn(c net.Conn, size int) *bufferedConn {
	return &bufferedConn{Conn: c, r: bufio.NewReaderSize(c, size)}
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
