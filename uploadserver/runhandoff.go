package uploadserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/diskimport/engine/errdefs"
)

// run is one record of a clone handed to its import: data, or the n
// bytes body reads, or zeros zero bytes, at off; or with end set, the End
// record's digest.
type run struct {
	off    int64
	data   []byte
	body   io.Reader
	n      int64
	zeros  int64
	end    bool
	digest string
}

// runHandoff is datasource.Runs fed by a session's requests, as io.Pipe
// is an io.Reader fed by writes: hand gives the import one run and
// returns once the import has applied it (it asked for the next) or
// ended, so the session's offset is always what the import holds and a
// run's data is never kept past its record.
type runHandoff struct {
	runs    chan run
	applied chan struct{} // one token per run taken, given when the next is asked for
	ended   <-chan struct{}
	closed  chan struct{}
	close1  sync.Once
	cause   error // close's, read once closed is closed

	// The import's goroutine only:
	taken  bool
	digest string
	buf    []byte       // NextRun's bytes of a run read off its request
	data   bytes.Reader // NextRunFrom's reader of a run's data
}

// newRunHandoff is a hand-over to an import that closes ended when it
// returns.
func newRunHandoff(ended <-chan struct{}) *runHandoff {
	return &runHandoff{runs: make(chan run), applied: make(chan struct{}, 1), ended: ended, closed: make(chan struct{})}
}

// NextRun is datasource.Runs's: the import takes the next run, telling
// the hand-over that the last one was applied. A run read off its request
// is read into a buffer here; one whose request failed under it was not
// taken, and the next run (the resumed request's) is waited for.
func (h *runHandoff) NextRun(ctx context.Context) (int64, []byte, int64, error) {
	for {
		r, err := h.next(ctx)
		if err != nil || r.body == nil {
			return r.off, r.data, r.zeros, err
		}
		if cap(h.buf) < int(r.n) {
			h.buf = make([]byte, r.n)
		}
		if _, err := io.ReadFull(r.body, h.buf[:r.n]); err == nil {
			return r.off, h.buf[:r.n], 0, nil
		}
	}
}

// NextRunFrom is datasource.RunsFrom's: a run read off its request is
// read by the import itself, straight into its buffers.
func (h *runHandoff) NextRunFrom(ctx context.Context) (int64, io.Reader, int64, int64, error) {
	r, err := h.next(ctx)
	switch {
	case err != nil:
		return 0, nil, 0, 0, err
	case r.body != nil:
		return r.off, r.body, r.n, 0, nil
	case len(r.data) > 0:
		h.data.Reset(r.data)
		return r.off, &h.data, int64(len(r.data)), 0, nil
	}
	return r.off, nil, 0, r.zeros, nil
}

// next takes the next run, telling the hand-over that the last one was
// applied; after the last, io.EOF.
func (h *runHandoff) next(ctx context.Context) (run, error) {
	if h.taken {
		h.taken = false
		h.applied <- struct{}{}
	}
	select {
	case r := <-h.runs:
		if r.end {
			h.digest = r.digest
			return run{}, io.EOF
		}
		h.taken = true
		return r, nil
	case <-h.closed:
		return run{}, h.cause
	case <-ctx.Done():
		return run{}, fmt.Errorf("receiving the clone: %w: %w", errdefs.ErrCancelled, ctx.Err())
	}
}

// Digest is the End record's, once NextRun returned io.EOF.
func (h *runHandoff) Digest() string { return h.digest }

// hand gives the import r and waits until it was applied. A request that
// ends before the import took r gets its context's error (r was not
// applied); once taken, r is waited for whatever the request does, since
// the offset must count it. errImportEnded: the import returned.
func (h *runHandoff) hand(ctx context.Context, r run) error {
	select {
	case h.runs <- r:
	case <-h.ended:
		return errImportEnded
	case <-ctx.Done():
		return fmt.Errorf("receiving the clone: %w: %w", errdefs.ErrCancelled, ctx.Err())
	}
	select {
	case <-h.applied:
		return nil
	case <-h.ended:
		return errImportEnded
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
