// Package ctxio makes reads that have no cancellation of their own (local
// files, standard input, a decoder running in the caller's goroutine) stop
// once a context is done.
package ctxio

import (
	"context"
	"io"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/iostage"
)

// Reader reads from an underlying reader until its context is done; the
// next Read then fails with Cancelled's error instead of reading on.
type Reader struct {
	ctx   context.Context
	what  string
	r     io.Reader
	close func() error
}

// NewReader returns a Reader of r under ctx. what names the reading in the
// cancellation error ("" for none).
func NewReader(ctx context.Context, what string, r io.Reader) *Reader {
	return &Reader{ctx: ctx, what: what, r: r}
}

// NewReadCloser is NewReader whose Close calls closeFn (nil: Close does
// nothing, for readers owned by someone else).
func NewReadCloser(ctx context.Context, what string, r io.Reader, closeFn func() error) *Reader {
	return &Reader{ctx: ctx, what: what, r: r, close: closeFn}
}

func (c *Reader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, Cancelled(c.what, err)
	}
	return c.r.Read(p)
}

// ReadRun is Read of a stream that may give runs of zeros
// (iostage.RunReader).
func (c *Reader) ReadRun(p []byte) (int, int64, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, 0, Cancelled(c.what, err)
	}
	return iostage.ReadRun(c.r, p)
}

// KnowsRuns says whether the stream gives runs of zeros.
func (c *Reader) KnowsRuns() bool { return iostage.KnowsRuns(c.r) }

// Close runs the close function given to NewReadCloser, if any.
func (c *Reader) Close() error {
	if c.close == nil {
		return nil
	}
	return c.close()
}

// Cancelled wraps a context error so that callers can match either it or
// errdefs.ErrCancelled; what, when not "", prefixes the message.
func Cancelled(what string, ctxErr error) error {
	return &errdefs.CancelledError{What: what, Context: ctxErr}
}
