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
	stage  boundStage
}

// boundStage is how far a request got: a bound armed for a stage is not
// replaced by one for an earlier stage (the transport may read the body's
// end after the answer began).
type boundStage int

const (
	stageSending   boundStage = iota // the request and its body
	stageWaiting                     // every byte sent, waiting for the answer
	stageAnswering                   // the answer arriving
	stageDone
)

// boundError is a request ended by its bound: what did not happen in time.
type boundError struct{ msg string }

func (e *boundError) Error() string { return e.msg }

// newRequestBound returns a bound over ctx armed for d, ending the request
// with the bound error msg.
func newRequestBound(ctx context.Context, d time.Duration, msg string) *requestBound {
	b := &requestBound{parent: ctx}
	b.ctx, b.cancel = context.WithCancelCause(ctx)
	b.arm(stageSending, d, msg)
	return b
}

// arm gives the request, at stage, d from now, then ends it with the bound
// error msg; d <= 0 leaves it without a bound. A stage before the current
// one arms nothing.
func (b *requestBound) arm(stage boundStage, d time.Duration, msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if stage < b.stage {
		return
	}
	b.stage = stage
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	b.d = d
	if d > 0 {
		cause := &boundError{msg}
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
	b.arm(stageDone, 0, "")
	b.cancel(nil)
}

// explain returns the bound's cause when it ended the request that failed
// with err, else err.
func (b *requestBound) explain(err error) error {
	var be *boundError
	if b.parent.Err() == nil && errors.As(context.Cause(b.ctx), &be) {
		return be
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
