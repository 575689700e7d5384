// Package nbdserver serves one NBD export, read-only or writable
// (fixed newstyle handshake, simple replies), so qemu-img can read an
// object our own code fetches (an HTTP range reader) through nbd+unix
// instead of through its own network drivers; or one WritableExport as a
// writable export, so qemu-img writes a target only through our code.
// The engine's two exports are ready made, each on a private Unix socket
// (UnixExport): ImageExport reads an image at random, DeviceExport writes
// a block device through its volume.DeviceWriter.
package nbdserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"

	"github.com/diskimport/engine/internal/buffers"
)

const (
	// DefaultMaxRequest bounds one read request; qemu's client never asks
	// for more than 32 MiB unless told it may.
	DefaultMaxRequest = 32 << 20
	// DefaultMaxInFlight bounds concurrent reads per connection, so memory
	// stays below MaxInFlight*MaxRequest per client.
	DefaultMaxInFlight = 16
)

// Server is an NBD server for one export, read-only (New) or writable
// (NewWritable). Any export name is accepted: the server listens on a
// private socket for one client.
type Server struct {
	export   io.ReaderAt
	writable WritableExport // nil for a read-only export
	size     int64          // the export's real size
	wire     int64          // the size advertised: size rounded up to 512 (see New)
	log      *slog.Logger

	// MaxRequest and MaxInFlight may be set before Serve; zero means the
	// defaults above. MinBlock is the minimum block size advertised (zero:
	// 1); the client aligns its requests to it, doing any read-modify-write
	// itself.
	MaxRequest  uint32
	MaxInFlight int
	MinBlock    uint32

	// Payloads reused between requests: up to smallBufSize and up to
	// pooledBufSize.
	small, bufs *buffers.Pool

	mu    sync.Mutex
	err   error // first read error of the export
	conns map[net.Conn]struct{}
}

// New returns a server for export, which holds size bytes. log defaults to
// slog.Default().
func New(export io.ReaderAt, size int64, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	// qemu's block layer rounds every size up to 512 bytes, and its NBD
	// client (7.2) then reads the padded tail of an unaligned export with
	// simple replies wrongly: it expects the padding on the wire, loses
	// sync and fails with "Connection closed". So advertise the rounded
	// size and serve zeros past the end, which is what qemu shows for a
	// local file of that size anyway.
	wire := (size + 511) &^ 511
	return &Server{export: export, size: size, wire: wire, log: log, conns: map[net.Conn]struct{}{}}
}

// NewWritable returns a server for a writable export of size bytes, which
// must be a multiple of 512 (qemu rounds sizes up to that, and padding
// cannot be written). It offers WRITE, FLUSH, TRIM, WRITE_ZEROES and fast
// zeroes, and no multi-conn: a flush on one connection need not cover the
// writes of another.
func NewWritable(export WritableExport, size int64, log *slog.Logger) (*Server, error) {
	if size%512 != 0 {
		return nil, fmt.Errorf("nbd: writable export size %d is not a multiple of 512", size)
	}
	s := New(export, size, log)
	s.writable = export
	return s, nil
}

// flags are the transmission flags advertised.
func (s *Server) flags() uint16 {
	if s.writable == nil {
		return transmissionFlags
	}
	return writableFlags
}

// Serve runs New(export, size, log).Serve(ctx, ln).
func Serve(ctx context.Context, ln net.Listener, export io.ReaderAt, size int64, log *slog.Logger) error {
	return New(export, size, log).Serve(ctx, ln)
}

// Err returns the first error the export returned to a read, which the
// client only saw as EIO; nil when every read succeeded.
func (s *Server) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Server) setErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// Serve accepts connections on ln until ctx ends, then closes ln and every
// connection and returns after all their goroutines have finished (nil
// when ctx ended, else the Accept error). Serve always closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if s.MaxRequest == 0 {
		s.MaxRequest = DefaultMaxRequest
	}
	if s.MaxInFlight <= 0 {
		s.MaxInFlight = DefaultMaxInFlight
	}
	if s.MinBlock == 0 {
		s.MinBlock = 1
	}
	// A connection holds at most one buffer per worker and one payload
	// being read.
	s.small = buffers.NewPool(smallBufSize, s.MaxInFlight+1, bufAlign)
	s.bufs = buffers.NewPool(pooledBufSize, s.MaxInFlight+1, bufAlign)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		<-ctx.Done()
		ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
	})
	var acceptErr error
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				acceptErr = fmt.Errorf("nbd: accept: %w", err)
			}
			break
		}
		s.mu.Lock()
		if ctx.Err() != nil {
			s.mu.Unlock()
			c.Close()
			break
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			if err := s.handle(ctx, c); err != nil && ctx.Err() == nil {
				s.log.Debug("NBD connection ended", "err", err)
			}
		})
	}
	cancel()
	wg.Wait()
	return acceptErr
}

// handle runs the handshake and then the transmission phase of one
// connection.
func (s *Server) handle(ctx context.Context, c net.Conn) error {
	ok, err := s.handshake(c)
	if err != nil || !ok {
		return err
	}
	return s.transmit(ctx, c)
}

var errAborted = errors.New("client aborted the handshake")
