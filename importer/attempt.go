package importer

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/nbdserver"
	"github.com/diskimport/engine/internal/volume"
	"github.com/diskimport/engine/qemu"
)

// attempt is one try at an import: what its phases share by design. Info
// opens the target and the source and decides the plan; every phase after
// it reads those and owns whatever else it opens (a scratch file, an NBD
// export, a staging directory), handing on explicitly what a later phase
// needs (imageInput) and registering what must go at the end (release).
type attempt struct {
	req    request
	log    *slog.Logger
	qemu   *qemu.Runner
	result Result
	meter  meter // read by the progress reporter's goroutine
	// progress reports a snapshot when a phase starts; nil without
	// request.Progress.
	progress *progressReporter

	// Set by Info, read by the phases after it.
	plan   *importPlan
	target *volume.Target // committed by Commit, else aborted
	source *sourceReader  // the read side of the transfer
	// caps is what the source's bytes allow (its local path, read in
	// place by qemu-img or a second time by Verify; the object qemu-img
	// reads on the ranged route; whether the source can be opened again).
	caps datasource.Capabilities
	// targetZeroed: Info zeroed the whole block target (request.ZeroTarget).
	targetZeroed bool
	// pass is routeDelta's, opened by Info in place of target: the target
	// claimed where it lies, and the local source or the session that
	// feeds a received pass.
	pass deltaPass
	// stagedArchive: an archive's staging directory was made in the
	// target (removed on failure).
	stagedArchive bool

	releases []func() // run last first when the attempt ends
}

// release registers what the attempt frees when it ends, success or not.
func (a *attempt) release(f func()) { a.releases = append(a.releases, f) }

// steps are the plan's phases: a small type over what the phase owns, or
// a method of the attempt for a phase that owns nothing (Resize, Commit,
// the stream routes' transfers, whose writers end with them).
func (a *attempt) steps(plan *importPlan) map[Phase]phaseStep {
	a.plan = plan
	if plan.Route == routeDelta {
		return map[Phase]phaseStep{PhaseTransferDelta: a.transferDelta, PhaseVerify: a.verifyDelta, PhaseCommit: a.commitDelta}
	}
	if plan.Route == routeBlank {
		return map[Phase]phaseStep{PhaseResize: a.createBlank, PhaseCommit: a.commitBlank}
	}
	if plan.Route == routeArchive {
		x := &archiveExtraction{a: a}
		a.release(x.removeStaging)
		return map[Phase]phaseStep{PhaseTransferDataDir: x.run, PhaseCommit: x.commit}
	}
	// What qemu-img reads: the local image itself, or what TransferScratch
	// or Validate put there.
	in := &imageInput{path: a.caps.LocalPath, format: plan.ConvertFormat}
	if plan.Route != routeInPlace {
		in.path = ""
	}
	a.release(func() { in.release(a.log) })
	transfer := a.transferRaw
	if plan.Route == routeStreamDecode {
		transfer = a.decodeStream
	}
	return map[Phase]phaseStep{
		PhaseTransferDataFile: transfer,
		PhaseTransferScratch:  (&scratchTransfer{a: a, out: in}).run,
		PhaseValidate:         (&validation{a: a, in: in}).run,
		PhaseConvert:          (&conversion{a: a, in: in}).run,
		PhaseResize:           a.resize,
		PhaseVerify:           (&verification{a: a, in: in}).run,
		PhaseCommit:           a.commit,
	}
}

// observe keeps the phase for progress reports and passes every event on
// to request.Events.
func (a *attempt) observe(e Event) {
	if e.Kind == EventPhaseStarted {
		a.meter.phase.Store(string(e.Phase))
		a.progress.now()
	}
	if a.req.Events != nil {
		a.req.Events(e)
	}
}

// commit makes the target durable under its final name: only then is the
// import Complete.
func (a *attempt) commit(ctx context.Context) error {
	if err := a.target.Commit(ctx); err != nil {
		return err
	}
	a.log.Info("Successfully completed fsync, committed to disk", "target", a.target.Path())
	return nil
}

// abort releases a failed target: a file is removed, a block device keeps
// its first MiB zeroed (volume.Target.Abort wipes an image head a writer
// already wrote: only verify or commit can fail that late).
func (a *attempt) abort() {
	if a.target == nil {
		return
	}
	if err := a.target.Abort(); err != nil {
		a.log.Warn("Cleaning up the target failed", "target", a.target.Path(), "err", err)
	}
}

// targetState says what the failed attempt left of its target, once
// aborted.
func (a *attempt) targetState() string {
	switch {
	case a.pass != nil:
		if a.pass.Written() > 0 {
			return TargetPartial
		}
	case a.stagedArchive:
		return TargetRemoved
	case a.target != nil && a.target.AbortedWritten():
		if a.target.Kind() == volume.Block {
			return TargetWiped
		}
		return TargetRemoved
	}
	return TargetUntouched
}

// cleanup frees what the attempt still holds, success or not.
func (a *attempt) cleanup() {
	if a.source != nil {
		a.source.close()
	}
	for i := len(a.releases) - 1; i >= 0; i-- {
		a.releases[i]()
	}
	if a.target != nil {
		a.target.Close()
	}
}

// imageInput is what qemu-img reads on a converting route, handed from
// phase to phase: the local image in place (set by Info), the scratch copy
// TransferScratch made, or the NBD export of an HTTP object that Validate
// starts. It owns the scratch file and the export from the moment they are
// handed to it, and release frees both.
type imageInput struct {
	path    string // a local path, or a qemu-img json: spec of the export
	format  format.Format
	scratch string                 // the scratch file, "" once removed
	export  *nbdserver.ImageExport // nil unless serving
}

// removeScratch deletes the scratch copy once nothing reads it any more.
func (in *imageInput) removeScratch(log *slog.Logger) {
	if in.scratch == "" {
		return
	}
	if err := os.Remove(in.scratch); err != nil && !os.IsNotExist(err) {
		log.Warn("Removing scratch file failed", "path", in.scratch, "err", err)
	}
	in.scratch = ""
}

// stopExport ends the NBD export of the HTTP object. Safe to repeat.
func (in *imageInput) stopExport(log *slog.Logger) { in.export.Stop(log) }

func (in *imageInput) release(log *slog.Logger) {
	in.stopExport(log)
	in.removeScratch(log)
}

// recordContentDigest puts the digest of the guest-visible bytes written
// (internal/blkhash: the same for one disk in any container) into the
// result, and fails the attempt when request.ExpectContentDigest names
// another one. The phases call it before Commit, so a mismatch aborts the
// target like any failure.
func (a *attempt) recordContentDigest(d blkhash.Digest) error {
	a.result.ContentDigest = d.String()
	if a.req.ExpectContentDigest == "" {
		a.log.Info("Content digest", "contentDigest", a.result.ContentDigest)
		return nil
	}
	if err := blkhash.Expect(d, a.req.ExpectContentDigest); err != nil {
		return fmt.Errorf("the image from %s: %w", a.req.Source, err)
	}
	a.log.Info("Content digest verified", "contentDigest", a.result.ContentDigest)
	return nil
}

// takeContentDigest records d, or, when the digest could not be had
// (err), fails the import only if one was expected.
func (a *attempt) takeContentDigest(d blkhash.Digest, err error) error {
	if err != nil {
		if a.req.ExpectContentDigest != "" {
			return fmt.Errorf("content digest of %s: %w", a.target.Path(), err)
		}
		a.log.Warn("No content digest of the image written", "target", a.target.Path(), "err", err)
		return nil
	}
	return a.recordContentDigest(d)
}
