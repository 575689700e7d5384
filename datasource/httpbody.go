package datasource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/diskimport/engine/errdefs"
)

// httpBody is the Stream body of an HTTP source. It turns the transport's
// read errors into engine errors, checks the byte count against
// Content-Length, and runs the stall watchdog.
//
// The watchdog is a time.AfterFunc timer armed only while a Read waits for
// the network, so a slow consumer is never mistaken for a stalled server and
// no goroutine exists unless the timer fires. Close stops it.
//
// A later resume-with-Range feature can live here: on a broken connection,
// re-issue the GET with "Range: bytes=got-" instead of returning the error.
type httpBody struct {
	src      *httpSource
	parent   context.Context // the caller's context
	reqCtx   context.Context // the request's context, cancelled by the watchdog
	cancel   context.CancelCauseFunc
	timer    *time.Timer
	stall    time.Duration
	stallErr error
	body     io.ReadCloser
	size     int64 // Content-Length or -1
	got      int64
	err      error // sticky: once the stream failed or ended, it stays so
	closed   atomic.Bool
}

var errBodyClosed = errors.New("read on closed HTTP source stream")

func (b *httpBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errBodyClosed
	}
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	b.timer.Reset(b.stall)
	n, err := b.body.Read(p)
	b.timer.Stop()
	b.got += int64(n)
	if err == nil {
		return n, nil
	}
	b.err = b.classify(err)
	return n, b.err
}

// classify maps the transport's end-of-body or error into what the engine
// sees. A short body is never a clean io.EOF, and never wraps
// io.ErrUnexpectedEOF either: readers up the pipeline (io.ReadFull users)
// treat that value as a normal short end.
func (b *httpBody) classify(err error) error {
	name := b.src.redacted
	if err == io.EOF {
		if b.size >= 0 && b.got != b.size {
			return fmt.Errorf("GET %s: connection closed after %d of %d bytes: %w", name, b.got, b.size, errdefs.ErrSourceUnreachable)
		}
		return io.EOF
	}
	if perr := b.parent.Err(); perr != nil {
		return cancelError(name, perr)
	}
	if context.Cause(b.reqCtx) == b.stallErr {
		return b.stallErr
	}
	if b.closed.Load() {
		return errBodyClosed
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		if b.size >= 0 {
			return fmt.Errorf("GET %s: connection closed after %d of %d bytes: %w (%v)", name, b.got, b.size, errdefs.ErrSourceUnreachable, err)
		}
		return fmt.Errorf("GET %s: connection closed after %d bytes (total size unknown): %w (%v)", name, b.got, errdefs.ErrSourceUnreachable, err)
	}
	return fmt.Errorf("GET %s: reading body after %d bytes: %w: %w", name, b.got, errdefs.ErrSourceUnreachable, err)
}

// Close may be called from another goroutine to abort a blocked Read.
func (b *httpBody) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.timer.Stop()
	err := b.body.Close()
	b.cancel(errBodyClosed)
	return err
}
