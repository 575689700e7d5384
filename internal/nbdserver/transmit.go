package nbdserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/diskimport/engine/errdefs"
)

// transmit serves requests until NBD_CMD_DISC, a protocol error or a
// closed connection. Reads and write-side commands run concurrently (qemu
// keeps several in flight), at most MaxInFlight at once, each replied to
// when it is done; replies are written whole under a mutex so they never
// interleave. It returns after every request it started has finished.
func (s *Server) transmit(ctx context.Context, c net.Conn) error {
	r := bufio.NewReaderSize(c, 64<<10)
	var wmu sync.Mutex
	reply := func(cookie uint64, errno uint32, data []byte) error {
		var h [16]byte
		be.PutUint32(h[0:], simpleRepMagic)
		be.PutUint32(h[4:], errno)
		be.PutUint64(h[8:], cookie)
		wmu.Lock()
		defer wmu.Unlock()
		bufs := net.Buffers{h[:]}
		if errno == 0 && len(data) > 0 {
			bufs = append(bufs, data)
		}
		_, err := bufs.WriteTo(c)
		return err
	}
	pool := startWorkers(s.MaxInFlight)
	defer pool.stop()
	for {
		var h [28]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return fmt.Errorf("reading request: %w", err)
		}
		if m := be.Uint32(h[0:]); m != requestMagic {
			return fmt.Errorf("bad request magic %#x", m)
		}
		typ := be.Uint16(h[6:])
		cookie := be.Uint64(h[8:])
		off := be.Uint64(h[16:])
		n := be.Uint32(h[24:])
		switch typ {
		case cmdRead:
			if n > s.MaxRequest || off > uint64(s.wire) || uint64(n) > uint64(s.wire)-off {
				if err := reply(cookie, errInval, nil); err != nil {
					return err
				}
				continue
			}
			err := pool.run(ctx, func() {
				buf, put := s.getBuf(int(n))
				defer put()
				// Past the real end is padding: zeros.
				want := buf[:max(0, min(int64(n), s.size-int64(off)))]
				clear(buf[len(want):])
				var got int
				var err error
				if len(want) > 0 {
					got, err = s.export.ReadAt(want, int64(off))
				}
				if got == len(want) {
					err = nil // io.ReaderAt may say io.EOF with a full read at the end
				} else if err == nil {
					err = io.ErrUnexpectedEOF
				}
				errno := uint32(0)
				if err != nil {
					s.setErr(fmt.Errorf("reading %d bytes at offset %d: %w", n, off, err))
					if ctx.Err() != nil || errors.Is(err, errdefs.ErrCancelled) {
						// Stopped (Ctrl-C, a failure elsewhere): the
						// import says so once; no warning per read.
						s.log.Debug("NBD export read stopped", "offset", off, "length", n, "err", err)
					} else {
						s.log.Warn("NBD export read failed", "offset", off, "length", n, "err", err)
					}
					errno = errIO
				}
				if err := reply(cookie, errno, buf); err != nil {
					c.Close() // the reader loop sees it and ends
				}
			})
			if err != nil {
				return err
			}
		case cmdWrite, cmdWriteZeroes, cmdTrim, cmdFlush:
			// A write's payload follows the header and must be consumed to
			// stay in sync; a huge one means a confused client.
			if typ == cmdWrite && n > s.MaxRequest {
				return fmt.Errorf("write request of %d bytes", n)
			}
			if s.writable == nil || !s.inBounds(off, n) {
				if typ == cmdWrite {
					if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
						return err
					}
				}
				errno := uint32(errNoSpc) // past the end of a writable export
				switch {
				case s.writable == nil && typ == cmdWrite:
					errno = errPerm
				case s.writable == nil:
					errno = errInval
				}
				if err := reply(cookie, errno, nil); err != nil {
					return err
				}
				continue
			}
			req := writeRequest{typ: typ, flags: be.Uint16(h[4:]), off: int64(off), n: n}
			put := func() {}
			if typ == cmdWrite {
				req.payload, put = s.getBuf(int(n))
				if _, err := io.ReadFull(r, req.payload); err != nil {
					put()
					return fmt.Errorf("reading write payload: %w", err)
				}
			}
			err := pool.run(ctx, func() {
				defer put()
				if err := reply(cookie, s.serveWrite(req), nil); err != nil {
					c.Close() // the reader loop sees it and ends
				}
			})
			if err != nil {
				put()
				return err
			}
		case cmdDisc:
			return nil
		default:
			if err := reply(cookie, errInval, nil); err != nil {
				return err
			}
		}
	}
}

// Buffers are recycled between requests, in two sizes: qemu-img convert
// reads and writes runs of plain clusters 2 MiB at a time (fresh buffers
// for each request made measurable garbage-collector work), and a
// compressed qcow2 one compressed cluster at a time, a few KiB to a little
// over 64 KiB. With 2 MiB buffers for those, the 16 reads qemu-img -m 16
// keeps in flight held 32 MiB to use a few hundred KiB of it.
const (
	pooledBufSize = 2 << 20
	smallBufSize  = 128 << 10
)

// getBuf returns an n-byte buffer (aligned, see bufAlign) and the
// function that gives it back.
func (s *Server) getBuf(n int) ([]byte, func()) {
	pool := s.bufs
	switch {
	case n <= smallBufSize:
		pool = s.small
	case n > pooledBufSize:
		return alignedBuf(n), func() {}
	}
	b := pool.Get()
	return b[:n], func() { pool.Put(b) }
}

// workers run a connection's requests on a fixed set of goroutines: at
// most n at once, and goroutines whose stacks have already grown to what
// an export's I/O path needs (a goroutine per request spent measurable
// time growing fresh stacks).
type workers struct {
	jobs chan func()
	wg   sync.WaitGroup
}

func startWorkers(n int) *workers {
	w := &workers{jobs: make(chan func())}
	for range n {
		w.wg.Go(func() {
			for job := range w.jobs {
				job()
			}
		})
	}
	return w
}

// run hands job to a free worker, waiting for one; it fails only when ctx
// ends first, and then job does not run.
func (w *workers) run(ctx context.Context, job func()) error {
	select {
	case w.jobs <- job:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop lets the workers finish the jobs they hold and waits for them.
func (w *workers) stop() {
	close(w.jobs)
	w.wg.Wait()
}
