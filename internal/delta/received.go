//go:build linux

package delta

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
)

// Receiver is the receiving end a pass over the wire writes: a volume's
// Target or a filesystem volume's TreeTarget.
type Receiver interface {
	Size() int64
	Offset() int64
	Data(off int64, p []byte) error
	Zero(off, n int64) error
	Verify(want blkhash.Digest) (blkhash.Digest, error)
	Finish(want blkhash.Digest) (blkhash.Digest, error)
	Pass() Pass
	Close() error
}

// ReceivedPass is a pass received over the wire as the steps the import
// engine's delta route runs, as LocalPass is a local one: Open (in Info:
// the target claimed in place and signed, its signature the session's
// first answer), Transfer (the runs the session hands over with Data and
// Zero, applied in order until End), Check (the target's digest against
// End's), Commit (the held ends written, Finish); Close at the end,
// whatever happened. The session's requests call Data, Zero, End and
// Abort from their own goroutines while Transfer runs in the engine's:
// each run is applied by Transfer and answered before the next is taken.
type ReceivedPass struct {
	path string
	size int64
	open func(ctx context.Context) (Receiver, func(io.Writer) (bool, error), error)

	t      Receiver
	answer func(io.Writer) (bool, error)
	start  time.Time
	want   *blkhash.Digest // End's digest, once received
	pass   Pass

	runs    chan run
	reply   chan error
	ready   chan struct{} // closed when Transfer starts taking runs
	stopped chan struct{} // closed when Transfer returned, or at Close
	stop    sync.Once
	aborted chan struct{}
	abort   sync.Once
	cause   error // Abort's, read once aborted is closed

	covered, written atomic.Int64
}

// run is one record of the session handed to Transfer: data at off, n
// zeros at off, or, with end set, the End record's digest.
type run struct {
	off, n int64
	data   []byte
	end    bool
	digest blkhash.Digest
}

// ReceiveVolume is a pass to be received onto the volume at path (a
// device, claimed exclusively, or a file, locked; OpenTarget's rules) from
// a source of size bytes whose content digest is base ("" names none).
func ReceiveVolume(path string, size int64, base string) *ReceivedPass {
	return newReceived(path, size, func(ctx context.Context) (Receiver, func(io.Writer) (bool, error), error) {
		t, err := OpenTarget(path, size)
		if err != nil {
			return nil, nil, err
		}
		sig, err := t.Sign(ctx)
		if err == nil {
			err = CheckBase(sig, base)
		}
		if err != nil {
			t.Close()
			return nil, nil, err
		}
		return t, func(w io.Writer) (bool, error) {
			sig := t.Signed()
			if sig == nil {
				return false, nil
			}
			_, err := sig.WriteTo(w)
			return true, err
		}, nil
	})
}

// ReceiveTree is a pass to be received onto the filesystem volume at dir,
// described by the manifest m (OpenTree's rules: every file sent whole
// when base is named and is not the volume's digest); a manifest Check
// refuses is refused here.
func ReceiveTree(dir string, m *Manifest, base string) (*ReceivedPass, error) {
	if err := m.Check(); err != nil {
		return nil, err
	}
	layout, err := m.LayOut()
	if err != nil {
		return nil, err
	}
	return newReceived(dir, layout.Size, func(ctx context.Context) (Receiver, func(io.Writer) (bool, error), error) {
		tt, err := OpenTree(ctx, dir, m, base)
		if err != nil {
			return nil, nil, err
		}
		isBase, digest := tt.Base()
		return tt, func(w io.Writer) (bool, error) {
			files, sigs := tt.Signed()
			if files == nil && tt.Offset() != 0 {
				return false, nil
			}
			return true, WriteTreeAnswer(w, &TreeAnswer{Base: isBase, BaseDigest: digest, Files: files, Kept: tt.Kept()}, sigs)
		}, nil
	}), nil
}

func newReceived(path string, size int64, open func(context.Context) (Receiver, func(io.Writer) (bool, error), error)) *ReceivedPass {
	return &ReceivedPass{
		path: path, size: size, open: open, start: time.Now(),
		runs: make(chan run), reply: make(chan error, 1),
		ready: make(chan struct{}), stopped: make(chan struct{}), aborted: make(chan struct{}),
	}
}

// Path is the target's path; Size the volume's size.
func (p *ReceivedPass) Path() string { return p.path }
func (p *ReceivedPass) Size() int64  { return p.size }

// Open claims the target in place and signs it. A target that is no base
// (none, another size, unreadable, not the base named) fails with
// errdefs.ErrNoDeltaBase.
func (p *ReceivedPass) Open(ctx context.Context) error {
	t, answer, err := p.open(ctx)
	if err != nil {
		return err
	}
	p.t, p.answer = t, answer
	p.pass = t.Pass()
	return nil
}

// WriteSignature writes the signature answer to w while no run was
// applied (false after: nothing to send again). It is for the session,
// once Ready is closed.
func (p *ReceivedPass) WriteSignature(w io.Writer) (bool, error) { return p.answer(w) }

// Ready is closed once Transfer takes runs: the target is open and
// signed.
func (p *ReceivedPass) Ready() <-chan struct{} { return p.ready }

// Offset is where a resumed session goes on: every run before it was
// applied.
func (p *ReceivedPass) Offset() int64 { return p.covered.Load() }

// Transfer applies the runs the session hands over, in order, until its
// End record (nil), a run the target refuses, Abort or ctx (the error).
func (p *ReceivedPass) Transfer(ctx context.Context) error {
	if p.t == nil {
		return fmt.Errorf("transferring a delta pass whose target was not opened: %w", errdefs.ErrInvalidOptions)
	}
	defer p.stop.Do(func() { close(p.stopped) })
	close(p.ready)
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("receiving the delta pass: %w: %w", errdefs.ErrCancelled, ctx.Err())
		case <-p.aborted:
			return p.cause
		case r := <-p.runs:
			err := p.apply(r)
			p.reply <- err
			if err != nil || r.end {
				return err
			}
		}
	}
}

func (p *ReceivedPass) apply(r run) error {
	switch {
	case r.end:
		d := r.digest
		p.want = &d
		p.covered.Store(p.size)
		return nil
	case r.data != nil:
		if err := p.t.Data(r.off, r.data); err != nil {
			return err
		}
		p.written.Add(int64(len(r.data)))
	default:
		if err := p.t.Zero(r.off, r.n); err != nil {
			return err
		}
	}
	p.covered.Store(p.t.Offset())
	return nil
}

// Data hands Transfer the source's bytes b at off and returns once they
// were applied (b is not kept).
func (p *ReceivedPass) Data(ctx context.Context, off int64, b []byte) error {
	return p.send(ctx, run{off: off, n: int64(len(b)), data: b})
}

// Zero hands Transfer n zero bytes at off.
func (p *ReceivedPass) Zero(ctx context.Context, off, n int64) error {
	return p.send(ctx, run{off: off, n: n})
}

// End hands Transfer the End record's digest, the source's: Transfer
// ends, and Check compares the target's with it.
func (p *ReceivedPass) End(ctx context.Context, digest blkhash.Digest) error {
	return p.send(ctx, run{end: true, digest: digest})
}

// send hands r to Transfer and waits for its answer; a run Transfer took
// is always answered, so the offset stays what was applied.
func (p *ReceivedPass) send(ctx context.Context, r run) error {
	select {
	case p.runs <- r:
		return <-p.reply
	case <-p.stopped:
		return fmt.Errorf("the delta pass onto %s takes no more runs: %w", p.path, errdefs.ErrCancelled)
	case <-ctx.Done():
		return fmt.Errorf("receiving the delta pass: %w: %w", errdefs.ErrCancelled, ctx.Err())
	}
}

// Abort ends Transfer with cause (the session ended without its End
// record); the pass then fails and Close leaves the target's ends zeroed.
func (p *ReceivedPass) Abort(cause error) {
	p.abort.Do(func() {
		p.cause = cause
		close(p.aborted)
	})
}

// Check compares the target's digest after the runs with the End
// record's, before the target's held ends are written, and returns it.
func (p *ReceivedPass) Check() (blkhash.Digest, error) {
	if p.t == nil || p.want == nil {
		return blkhash.Digest{}, fmt.Errorf("checking a delta pass that did not receive its end: %w", errdefs.ErrInvalidOptions)
	}
	return p.t.Verify(*p.want)
}

// Commit completes the target once its digest was checked (Finish: the
// held ends written and synced, a filesystem volume's files placed).
func (p *ReceivedPass) Commit() error {
	if p.t == nil || p.want == nil {
		return fmt.Errorf("committing a delta pass that did not receive its end: %w", errdefs.ErrInvalidOptions)
	}
	if _, err := p.t.Finish(*p.want); err != nil {
		return err
	}
	p.pass = p.t.Pass()
	p.pass.Received = true
	p.pass.Duration = time.Since(p.start)
	return nil
}

// Pass reports the pass so far (whether it was final only the sender can
// tell: Final stays false).
func (p *ReceivedPass) Pass() *Pass {
	q := p.pass
	if p.t != nil && !q.Received {
		q = p.t.Pass()
	}
	return &q
}

// Compared is how many bytes of the volume the runs have covered (the
// whole once End arrived); SourceRead the same: the sender read them.
func (p *ReceivedPass) Compared() int64   { return p.covered.Load() }
func (p *ReceivedPass) SourceRead() int64 { return p.covered.Load() }

// Written is how many bytes of data runs reached the target.
func (p *ReceivedPass) Written() int64 { return p.written.Load() }

// Close releases the target: before Commit, once a run was applied, its
// ends stay zeroed, so it is no copy anything takes for done.
func (p *ReceivedPass) Close() {
	p.stop.Do(func() { close(p.stopped) })
	if p.t != nil {
		p.t.Close()
	}
}
