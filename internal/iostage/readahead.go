package iostage

import (
	"context"
	"errors"
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
// (or Next) has returned the source's error the goroutine has ended: it no
// longer touches the source, so it may be read directly again (the engine
// drains it after the decoder), and it writes no buffer again, so the last
// chunk Next handed out keeps its bytes (the volume writer keeps a short
// last chunk as the one it stages, without a copy).
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
	return NewAlignedReadAhead(r, size, count, 1)
}

// NewAlignedReadAhead is NewReadAhead into buffers aligned to align bytes
// (an O_DIRECT source reads only into those).
func NewAlignedReadAhead(r io.Reader, size, count, align int) *ReadAhead {
	count = max(count, 2)
	a := &ReadAhead{
		full: make(chan filledBuf, count),
		free: buffers.Circulating(count, size, align),
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
		if a.err != nil {
			a.release()
			return 0, a.err
		}
		if len(p) == 0 {
			return 0, nil
		}
		if err := a.take(nil); err != nil {
			return 0, err
		}
	}
	n := copy(p, a.cur)
	a.cur = a.cur[n:]
	return n, nil
}

// Next hands out the next buffer the goroutine filled as it is, without
// copying it, for a consumer that takes whole chunks: it stays valid
// until the next call of Next (or Read). After the last one it returns
// the source's error (io.EOF at the end).
func (a *ReadAhead) Next() ([]byte, error) {
	return a.next(nil)
}

// NextContext is Next that also returns when ctx ends while it waits for
// the goroutine, with ctx's error; the goroutine's read of the source goes
// on until it returns (Close it: a stalled source may never return).
func (a *ReadAhead) NextContext(ctx context.Context) ([]byte, error) {
	b, err := a.next(ctx.Done())
	if errors.Is(err, errWaitCancelled) {
		return nil, ctx.Err()
	}
	return b, err
}

func (a *ReadAhead) next(cancel <-chan struct{}) ([]byte, error) {
	for {
		a.cur = nil
		if a.err != nil {
			a.release()
			return nil, a.err
		}
		if err := a.take(cancel); err != nil {
			return nil, err
		}
		if len(a.cur) > 0 {
			return a.cur, nil
		}
	}
}

// errWaitCancelled is take's answer when cancel closed first (NextContext
// returns the context's error instead).
var errWaitCancelled = errors.New("read-ahead: wait cancelled")

// take hands back the buffer consumed and makes the next filled one
// current. A close of cancel (nil: never) ends the wait with
// errWaitCancelled, the ReadAhead as it was.
func (a *ReadAhead) take(cancel <-chan struct{}) error {
	a.release()
	var f filledBuf
	select {
	case <-cancel:
		return errWaitCancelled
	case f = <-a.full:
	case <-a.done:
		// The goroutine ended: after its last chunk, or closed.
		select {
		case f = <-a.full:
		default:
			a.err = fmt.Errorf("read-ahead: %w", errdefs.ErrClosed)
			return a.err
		}
	}
	a.cur, a.curBuf, a.err = f.buf[:f.n], f.buf, f.err
	return nil
}

// release hands the buffer being consumed back to the goroutine.
func (a *ReadAhead) release() {
	if a.curBuf != nil {
		a.free <- a.curBuf
		a.curBuf = nil
	}
}

// Close stops the reading goroutine. It does not wait for a read of the
// source in progress (a stalled upload would hold it): the goroutine ends
// once that read returns, and a Read waiting for it then fails with
// errdefs.ErrClosed, after the bytes already read ahead.
func (a *ReadAhead) Close() error {
	a.closeOnce.Do(func() { close(a.stop) })
	return nil
}

// Wait waits for the goroutine to end: after Close, once its read of the
// source in progress returns; after the source's error, at once. A
// caller that hands the source to someone else (or closes it) waits first,
// when the source is known to return.
func (a *ReadAhead) Wait() {
	<-a.done
}
