package uploadserver

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/diskimport/engine/errdefs"
)

// run is one record of a clone handed to its import: data, or zeros
// zero bytes, at off; or with end set, the End record's digest.
type run struct {
	off    int64
	data   []byte
	zeros  int64
	end    bool
	digest string
}

// runHandoff is datasource.Runs fed by a session's requests, as io.Pipe
// is an io.Reader fed by writes, with room for handoffDepth runs between
// them: give queues a run and returns, so the request decodes the next
// records (TLS, s2) while the import hashes and writes the last ones. A
// given run belongs to the import: the session's offset counts it (the
// import applies every run it was given, in order, or fails), and its
// data buffer comes back through buffer once the import asked for the
// next run.
type runHandoff struct {
	runs   chan run
	free   chan []byte // data buffers the import is done with
	ended  <-chan struct{}
	closed chan struct{}
	close1 sync.Once
	cause  error // close's, read once closed is closed

	// The import's goroutine only:
	taken  []byte // the data of the run NextRun returned last
	digest string
}

// handoffDepth is how many runs a request may give ahead of the import.
// Measured on a 2 GiB block clone of random data (2 cores): with each
// record waited for until applied, the request and the import took turns
// (1.07 of 2 cores busy).
const handoffDepth = 4

// newRunHandoff is a hand-over to an import that closes ended when it
// returns.
func newRunHandoff(ended <-chan struct{}) *runHandoff {
	return &runHandoff{runs: make(chan run, handoffDepth), free: make(chan []byte, handoffDepth+2), ended: ended, closed: make(chan struct{})}
}

// NextRun is datasource.Runs's: the import takes the next run, handing
// back the data buffer of the last.
func (h *runHandoff) NextRun(ctx context.Context) (int64, []byte, int64, error) {
	if h.taken != nil {
		select {
		case h.free <- h.taken:
		default: // enough buffers wait already
		}
		h.taken = nil
	}
	select {
	case r := <-h.runs:
		if r.end {
			h.digest = r.digest
			return 0, nil, 0, io.EOF
		}
		h.taken = r.data
		return r.off, r.data, r.zeros, nil
	case <-h.closed:
		return 0, nil, 0, h.cause
	case <-ctx.Done():
		return 0, nil, 0, fmt.Errorf("receiving the clone: %w: %w", errdefs.ErrCancelled, ctx.Err())
	}
}

// Digest is the End record's, once NextRun returned io.EOF.
func (h *runHandoff) Digest() string { return h.digest }

// give hands r to the import, its data with it. A request that ends
// before r was queued gets its context's error (r was not given);
// errImportEnded: the import returned.
func (h *runHandoff) give(ctx context.Context, r run) error {
	select {
	case h.runs <- r:
		return nil
	case <-h.ended:
		return errImportEnded
	case <-ctx.Done():
		return fmt.Errorf("receiving the clone: %w: %w", errdefs.ErrCancelled, ctx.Err())
	}
}

// buffer is a data buffer for the next record to be read into: one the
// import is done with, or nil (the decoder makes one) while none is.
func (h *runHandoff) buffer() []byte {
	select {
	case b := <-h.free:
		return b
	default:
		return nil
	}
}

// end hands the End record's digest: the runs end there.
func (h *runHandoff) end(ctx context.Context, digest string) error {
	select {
	case h.runs <- run{end: true, digest: digest}:
		return nil
	case <-h.ended:
		return errImportEnded
	case <-ctx.Done():
		return fmt.Errorf("receiving the clone: %w: %w", errdefs.ErrCancelled, ctx.Err())
	}
}

// close ends the runs with cause: the import's next NextRun returns it.
func (h *runHandoff) close(cause error) {
	h.close1.Do(func() {
		h.cause = cause
		close(h.closed)
	})
}
