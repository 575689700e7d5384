package main

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"
)

// requestBound ends one request of `importer upload` when it waits too
// long: its context is cancelled with the cause armed last (a HEAD or
// status request never answered, a body the server stopped taking, an
// answer that stopped arriving, the --wait for the import's result).
// Progress re-arms it; a request waits without a bound only while the
// body is all sent and no --wait was given (a synchronous upload is
// answered once the import is complete, which may take as long as it
// takes).
type requestBound struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	timer  *time.Timer
	d      time.Duration
	cause  error
}

// newRequestBound returns a bound over ctx armed for d with cause.
func newRequestBound(ctx context.Context, d time.Duration, cause error) *requestBound {
	b := &requestBound{parent: ctx}
	b.ctx, b.cancel = context.WithCancelCause(ctx)
	b.arm(d, cause)
	return b
}

// arm gives the request d from now, then cancels it with cause; d <= 0
// leaves it without a bound.
func (b *requestBound) arm(d time.Duration, cause error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	b.d, b.cause = d, cause
	if d > 0 {
		b.timer = time.AfterFunc(d, func() { b.cancel(cause) })
	}
}

// progress gives the request its whole bound again.
func (b *requestBound) progress() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timer != nil {
		b.timer.Reset(b.d)
	}
}

// stop releases the bound; the context ends.
func (b *requestBound) stop() {
	b.arm(0, nil)
	b.cancel(nil)
}

// explain returns the bound's cause when it ended the request that failed
// with err, else err.
func (b *requestBound) explain(err error) error {
	if b.parent.Err() == nil && b.ctx.Err() != nil {
		if cause := context.Cause(b.ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
	}
	return err
}

// boundReader re-arms a bound on every byte read through it, and calls
// atEOF once at the end.
type boundReader struct {
	r     io.Reader
	b     *requestBound
	atEOF func()
	ended bool
}

func (r *boundReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.b.progress()
	}
	if err == io.EOF && !r.ended {
		r.ended = true
		if r.atEOF != nil {
			r.atEOF()
		}
	}
	return n, err
}
