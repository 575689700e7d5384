package iostage

import (
	"fmt"
	"io"
	"sync"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/buffers"
)

// ReadAhead reads its source on a goroutine of its own into a few large
// buffers, ahead of the consumer. Under an in-process decompressor it takes
// the source's cost (network receive syscalls, checksum hashing in a tee
// below it) off the decoder's goroutine, which is the pipeline's critical
// path: on two cores the second one does that work while the first decodes.
//
// The source's bytes come out in order, then its error (io.EOF included)
// exactly as the source returned it. Read is for one goroutine. Once Read
// has returned the source's error the goroutine no longer touches the
// source, so it may be read directly again (the engine drains it after the
// decoder).
type ReadAhead struct {
	full chan filledBuf
	free chan []byte
	stop chan struct{}
	done chan struct{}

	cur    []byte // unread part of the buffer being consumed
	curBuf []byte // that buffer, to hand back
	err    error  // the source's error, returned once cur is empty

	closeOnce sync.Once
}

type filledBuf struct {
	buf []byte
	n   int
	err error
}

// NewReadAhead starts reading r in count buffers of size bytes.
func NewReadAhead(r io.Reader, size, count int) *ReadAhead {
	count = max(count, 2)
	a := &ReadAhead{
		full: make(chan filledBuf, count),
		free: buffers.Circulating(count, size, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	go a.fill(r)
	return a
}

// fill is the reading goroutine. Buffers are filled whole (ReadChunk), so a
// source that returns small pieces (a socket) still reaches the consumer in
// large ones.
func (a *ReadAhead) fill(r io.Reader) {
	defer close(a.done)
	for {
		select {
		case <-a.stop: // before a free buffer, which may be ready too
			return
		default:
		}
		var buf []byte
		select {
		case buf = <-a.free:
		case <-a.stop:
			return
		}
		n, eof, err := ReadChunk(r, buf)
		if eof {
			err = io.EOF
		}
		// full has room for every buffer, so this never blocks.
		a.full <- filledBuf{buf: buf, n: n, err: err}
		if err != nil {
			return
		}
	}
}

func (a *ReadAhead) Read(p []byte) (int, error) {
	for len(a.cur) == 0 {
		if a.curBuf != nil {
			a.free <- a.curBuf
			a.curBuf = nil
		}
		if a.err != nil {
			return 0, a.err
		}
		if len(p) == 0 {
			return 0, nil
		}
		var f filledBuf
		select {
		case f = <-a.full:
		case <-a.done:
			// The goroutine ended: after its last chunk, or closed.
			select {
			case f = <-a.full:
			default:
				a.err = fmt.Errorf("read-ahead: %w", errdefs.ErrClosed)
				return 0, a.err
			}
		}
		a.cur, a.curBuf, a.err = f.buf[:f.n], f.buf, f.err
	}
	n := copy(p, a.cur)
	a.cur = a.cur[n:]
	return n, nil
}

// Close stops the reading goroutine. It does not wait for a read of the
// source in progress (a stalled upload would hold it): the goroutine ends
// once that read returns, and a Read waiting for it then fails with
// errdefs.ErrClosed, after the bytes already read ahead.
func (a *ReadAhead) Close() error {
	a.closeOnce.Do(func() { close(a.stop) })
	return nil
}
