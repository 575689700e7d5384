package nbdserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"sync"
)

// transmit serves requests until NBD_CMD_DISC, a protocol error or a
// closed connection. Reads run concurrently (qemu keeps several in
// flight), at most MaxInFlight at once; replies are written whole under
// a mutex so they never interleave. It returns after every read it
// started has finished.
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
	sem := make(chan struct{}, s.MaxInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
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
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			wg.Go(func() {
				defer func() { <-sem }()
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
					s.log.Warn("NBD export read failed", "offset", off, "length", n, "err", err)
					errno = errIO
				}
				if err := reply(cookie, errno, buf); err != nil {
					c.Close() // the reader loop sees it and ends
				}
			})
		case cmdWrite:
			// The payload follows the header and must be consumed to stay
			// in sync; a huge one means a confused client.
			if n > s.MaxRequest {
				return fmt.Errorf("write request of %d bytes", n)
			}
			if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
				return err
			}
			if err := reply(cookie, errPerm, nil); err != nil {
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

// pooledBufSize is the buffer size recycled between reads: qemu-img
// convert reads 2 MiB at a time, and fresh buffers for each read made
// measurable garbage-collector work.
const pooledBufSize = 2 << 20

// getBuf returns an n-byte buffer and the function that gives it back.
func (s *Server) getBuf(n int) ([]byte, func()) {
	if n > pooledBufSize {
		return make([]byte, n), func() {}
	}
	bp, _ := s.bufs.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, pooledBufSize)
		bp = &b
	}
	return (*bp)[:n], func() { s.bufs.Put(bp) }
}
