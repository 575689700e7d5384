package importer

import (
	"context"
	"errors"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/format"
)

// deltaPass is a delta pass as the steps routeDelta's phases run, in
// order (Transfer, Check, Commit; Close at the end): a local one
// (delta.LocalPass) or one received over the wire (delta.ReceivedPass).
// Compared, SourceRead and Written are read by the progress reporter
// while it runs.
type deltaPass interface {
	Size() int64
	Transfer(ctx context.Context) error
	Check() (blkhash.Digest, error)
	Commit() error
	Pass() *delta.Pass
	Compared() int64
	SourceRead() int64
	Written() int64
	Close()
}

// passMeter holds the attempt's delta pass for the progress reporter.
type passMeter struct{ deltaPass }

// deltaInfo is Info on routeDelta: the pass is opened (the source for
// reading, the target claimed where it lies, never staged: a device
// cannot be, and a staged file would cost the full write a delta avoids)
// and the plan decided.
func (a *attempt) deltaInfo(f *importFacts) (*importPlan, error) {
	path := delta.TargetPath(a.req.Target)
	a.result.Target = path
	a.result.VirtualSize = f.sourceSize
	a.log.Info("Image detected", "format", f.format, "sourceSize", f.sourceSize, "target", path, "targetSize", f.deltaTarget.Size)
	pass, err := delta.OpenLocal(a.caps.LocalPath, path, delta.LocalOptions{Base: a.req.DeltaBase, Fit: deltaFit(a.req.ExactSize), Logger: a.log})
	if err != nil {
		return nil, noDeltaBase(err)
	}
	a.pass = pass
	a.release(pass.Close)
	a.meter.delta.Store(&passMeter{pass})
	return a.choosePlan(f), nil
}

// receivedDeltaInfo is Info for a delta pass received over the wire
// (request.DeltaReceived): the target claimed in place and signed, its
// signature the session's first answer; the source is the session, which
// is not read here. A target that is no base fails the import: the
// sender clones in full.
func (a *attempt) receivedDeltaInfo(ctx context.Context) (*importPlan, error) {
	pass := a.req.DeltaReceived
	a.result.Target = pass.Path()
	a.result.VirtualSize = pass.Size()
	a.result.SourceFormat = string(format.Raw)
	a.meter.sourceSize.Store(pass.Size())
	a.log.Info("Image detected", "format", format.Raw, "sourceSize", pass.Size(), "target", pass.Path(), "source", "a delta pass received")
	a.release(pass.Close)
	if err := pass.Open(ctx); err != nil {
		return nil, err
	}
	a.log.Info("Delta target signed", "target", pass.Path(), "blocks", pass.Pass().Blocks, "baseDigest", pass.Pass().BaseDigest)
	if a.req.deltaSigned != nil {
		a.req.deltaSigned(&DeltaSignature{answer: pass.WriteSignature})
	}
	a.pass = pass
	a.meter.delta.Store(&passMeter{pass})
	return a.choosePlan(&importFacts{format: format.Raw, sourceSize: pass.Size(), deltaReceived: true}), nil
}

// transferDelta is TransferDelta: both sides signed, the runs that differ
// written into the target, its first and last MiB held in memory from
// the first write (delta.Target).
func (a *attempt) transferDelta(ctx context.Context) error {
	if err := a.pass.Transfer(ctx); err != nil {
		return noDeltaBase(err)
	}
	a.result.BytesWritten = a.pass.Size()
	a.result.DataBytes = a.pass.Pass().DataBytes
	return nil
}

// verifyDelta is Verify on routeDelta: the target's digest after the
// runs against the source's as sent, and the expected content digest,
// before the target's held ends are written.
func (a *attempt) verifyDelta(context.Context) error {
	d, err := a.pass.Check()
	if err != nil {
		return err
	}
	return a.recordContentDigest(d)
}

// commitDelta is Commit on routeDelta: the held ends written once the
// rest is synced, and synced.
func (a *attempt) commitDelta(context.Context) error {
	if err := a.pass.Commit(); err != nil {
		return err
	}
	p := a.pass.Pass()
	a.result.takeDeltaPass(p)
	a.log.Info("Delta pass committed", "target", a.result.Target, "blocksChanged", p.BlocksChanged, "dataBytes", p.DataBytes,
		"zeroBytes", p.ZeroBytes, "final", p.Final, "contentDigest", p.Digest)
	return nil
}

// noDeltaBase is err, marked to restart the import as a full clone when
// the target was found not to be a base (errdefs.ErrNoDeltaBase: not the
// base named, unreadable, resized since Info looked).
func noDeltaBase(err error) error {
	if errors.Is(err, errdefs.ErrNoDeltaBase) {
		return &routeClosedError{route: routeDelta, err: err}
	}
	return err
}

// takeDeltaPass records the completed delta pass p in r: the volume's
// size as written, the data bytes the pass wrote, and the content digest
// both sides' block hashes gave, verified.
func (r *Result) takeDeltaPass(p *delta.Pass) {
	r.VirtualSize, r.TargetSize, r.BytesWritten = p.Size, max(p.Size, p.TargetSize), p.Size
	r.DataBytes = p.DataBytes
	r.ContentDigest, r.SourceDigest, r.TargetDigest = p.Digest, p.Digest, p.Digest
	r.Verified, r.VerifyMethod = true, string(verifyBlockHashes)
	r.Delta = deltaPassOf(p)
}
