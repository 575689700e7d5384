package uploadserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cloner"
)

// sparseTarget is the engine import a sparse-v2 session writes into: the
// source's records handed over as runs (datasource.NewRuns), one at a
// time, each applied by the import before the request takes the next
// record, so offset is always what the import holds. Zero records stay
// lengths (zeroed ranges on a device, holes in a file) and every byte is
// hashed once, by the import, which compares the End record's digest with
// the disk it wrote before Commit. The engine owns the target: its size
// rules (refused before a byte is written), preallocation, the held-back
// first MiB of a device, Commit and the Result.
type sparseTarget struct {
	runs   *runHandoff
	offset int64 // bytes applied, in source order
	size   int64
	ready  chan struct{} // closed once the import took the target (Info passed)
	done   chan struct{}
	res    *importer.Result
	err    error
}

// errSessionEnded ends the import's stream when the session ends without
// its End record (a hostile record, an expired resume window);
// errImportEnded refuses writes once the import returned.
var (
	errSessionEnded = errors.New("the clone session ended before its end record")
	errImportEnded  = errors.New("the clone's import has ended")
)

// startSparseTarget starts the import of a source of size bytes. It runs
// under ctx (the server's, not a request's: the session outlives its
// requests), with the handler's phases and events.
func (h *Handler) startSparseTarget(ctx context.Context, size int64) *sparseTarget {
	t := &sparseTarget{size: size, ready: make(chan struct{}), done: make(chan struct{})}
	t.runs = newRunHandoff(t.done)
	o := h.opts.Import
	o.Source, o.SourceReader, o.CustomSource = "", nil, datasource.NewRuns("the clone", t.runs, size)
	o.ContentType = importer.ContentTypeAsIs
	o = h.withEvents(o, func() {})
	events, took := o.Events, sync.OnceFunc(func() { close(t.ready) })
	o.Events = func(e importer.Event) {
		events(e)
		if e.Kind == importer.EventPhaseStarted && e.Phase == importer.PhaseTransferDataFile {
			took()
		}
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		defer close(t.done)
		t.res, t.err = importer.Import(ctx, o)
	}()
	return t
}

// opened waits until the import has opened the target and checked that
// the source fits, so a target too small is refused at the Start record.
func (t *sparseTarget) opened(ctx context.Context) error {
	select {
	case <-t.ready:
		return nil
	case <-t.done:
		return t.failed(errImportEnded)
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errdefs.ErrCancelled, ctx.Err())
	}
}

// failed is the import's own error once a run could not be handed to it:
// the cause (the target too small, a checksum) is the engine's, the
// hand-over only noticed it ended.
func (t *sparseTarget) failed(err error) error {
	<-t.done
	return cmp.Or(t.err, err)
}

// write hands the current data record of dec to the import, which reads
// its bytes off the request straight into the target's chunks. When the
// request's connection fails under the import the record was not
// applied: a *readError, the request's.
func (t *sparseTarget) write(ctx context.Context, dec *cloner.Decoder, n int64) error {
	if err := t.runs.hand(ctx, run{off: t.offset, body: dec.DataReader(), n: n}); err != nil {
		return t.handErr(err)
	}
	if err := dec.DataErr(); err != nil {
		return &readError{err}
	}
	t.offset += n
	return nil
}

// readError is a data record's bytes cut short under the import: a
// failure of the request's transport, not of the target.
type readError struct{ err error }

func (e *readError) Error() string { return "reading a data record: " + e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// zero hands n zero bytes at the current offset to the import as their
// count: nothing crossed the wire, nothing is expanded or hashed here.
func (t *sparseTarget) zero(ctx context.Context, n int64) error {
	if err := t.runs.hand(ctx, run{off: t.offset, zeros: n}); err != nil {
		return t.handErr(err)
	}
	t.offset += n
	return nil
}

// handErr is a failed hand-over's error: the request's end as it is (a
// transport failure the session resumes after), or the import's.
func (t *sparseTarget) handErr(err error) error {
	if errors.Is(err, errImportEnded) {
		return t.failed(err)
	}
	return err
}

// commit hands the End record's digest to the import, which compares it
// with the disk it wrote and finishes: Resize, Commit, the Result.
func (t *sparseTarget) commit(ctx context.Context, digest string) (*importer.Result, error) {
	if err := t.runs.end(ctx, digest); err != nil {
		return nil, t.handErr(err)
	}
	<-t.done
	return t.res, t.err
}

// abort ends the runs with cause: the import fails and releases the
// target (a file it created is removed, a device's first MiB unwritten).
func (t *sparseTarget) abort(cause error) {
	if cause == nil {
		cause = errSessionEnded
	}
	t.runs.close(cause)
	<-t.done
}
