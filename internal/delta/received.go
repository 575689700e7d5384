//go:build linux

package delta

import (
	"context"
	"fmt"
	"io"
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

// Runs are a pass's runs as the receiving end takes them, in order, each
// at its offset (the blocks the target already holds are gaps): data, or
// with data nil, zeros zero bytes; io.EOF after the last, Digest then the
// source's content digest, which the target must have after them. It is
// datasource.Runs's method set (importer.ReceivedDelta hands one over).
type Runs interface {
	NextRun(ctx context.Context) (off int64, data []byte, zeros int64, err error)
	Digest() string
}

// ReceivedPass is a pass received over the wire as the steps the import's
// delta route runs, as LocalPass is a local one: Open (in Info: the target
// claimed in place and signed, its signature the session's first answer,
// WriteSignature), Transfer (the runs taken from its Runs and applied in
// order until their end), Check (the target's digest against the runs'),
// Commit (the held ends written, Finish); Close at the end, whatever
// happened. Whoever feeds the Runs (the upload server's session) sees a
// run applied when the next is asked for.
type ReceivedPass struct {
	path string
	size int64
	open func(ctx context.Context) (Receiver, func(io.Writer) (bool, error), error)
	runs Runs

	t      Receiver
	answer func(io.Writer) (bool, error)
	start  time.Time
	want   *blkhash.Digest // the runs' digest, once they ended
	pass   Pass

	covered, written atomic.Int64
}

// ReceiveVolume is a pass to be received onto the volume at path (a
// device, claimed exclusively, or a file, locked; OpenTargetFit's rules
// with fit) from a source of size bytes whose content digest is base (""
// names none), its runs taken from runs.
func ReceiveVolume(path string, size int64, fit Fit, base string, runs Runs) *ReceivedPass {
	return newReceived(path, size, runs, func(ctx context.Context) (Receiver, func(io.Writer) (bool, error), error) {
		t, err := OpenTargetFit(path, size, fit)
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
// refuses is refused here; its runs are taken from runs.
func ReceiveTree(dir string, m *Manifest, base string, runs Runs) (*ReceivedPass, error) {
	if err := m.Check(); err != nil {
		return nil, err
	}
	layout, err := m.LayOut()
	if err != nil {
		return nil, err
	}
	return newReceived(dir, layout.Size, runs, func(ctx context.Context) (Receiver, func(io.Writer) (bool, error), error) {
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

func newReceived(path string, size int64, runs Runs, open func(context.Context) (Receiver, func(io.Writer) (bool, error), error)) *ReceivedPass {
	return &ReceivedPass{path: path, size: size, runs: runs, open: open, start: time.Now()}
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
// once Open succeeded.
func (p *ReceivedPass) WriteSignature(w io.Writer) (bool, error) { return p.answer(w) }

// Transfer applies the runs, in order, until their end (nil), a run the
// target refuses, or the Runs' own error (a session that ended without
// its End record, ctx).
func (p *ReceivedPass) Transfer(ctx context.Context) error {
	if p.t == nil {
		return fmt.Errorf("transferring a delta pass whose target was not opened: %w", errdefs.ErrInvalidOptions)
	}
	for {
		off, data, zeros, err := p.runs.NextRun(ctx)
		switch {
		case err == io.EOF:
			d, err := blkhash.ParseDigest(p.runs.Digest())
			if err != nil {
				return fmt.Errorf("the delta pass ended without the source's content digest (%q): %w", p.runs.Digest(), errdefs.ErrInvalidImage)
			}
			p.want = &d
			p.covered.Store(p.size)
			return nil
		case err != nil && ctx.Err() != nil:
			return fmt.Errorf("receiving the delta pass: %w: %w", errdefs.ErrCancelled, ctx.Err())
		case err != nil:
			return err
		case len(data) > 0:
			if err := p.t.Data(off, data); err != nil {
				return err
			}
			p.written.Add(int64(len(data)))
		case zeros > 0:
			if err := p.t.Zero(off, zeros); err != nil {
				return err
			}
		}
		p.covered.Store(p.t.Offset())
	}
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
	if p.t != nil {
		p.t.Close()
	}
}
