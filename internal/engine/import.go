package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/qemu"
)

// Import runs the request: attempts until one ends without asking to start
// over (restart.go), each attempt Info then the phases of its plan.
func Import(ctx context.Context, r Request) (*Result, error) {
	return importWithRestarts(ctx, r)
}

// importOnce is one attempt. The source is the request's across attempts:
// it carries the retry budget and count.
func importOnce(ctx context.Context, r Request, start time.Time) (*Result, error) {
	j := newJob(r)
	defer j.cleanup()

	m := &Machine{Logger: j.log, Observe: j.observe, Wrap: r.Wrap}
	stopProgress := j.startProgress(ctx)
	_, phases, err := m.Run(ctx, j.info, j.steps)
	stopProgress()

	j.result.Phases = phases
	j.result.Duration = time.Since(start)
	if c := j.counter.Load(); c != nil {
		j.result.BytesRead = c.Count()
	}
	if err != nil {
		err = j.classify(ctx, err)
		j.abort()
		return &j.result, err
	}
	j.result.Complete = true
	return &j.result, nil
}

// newJob sets up one attempt; the target is opened in the Info phase so a
// busy device is refused before any download starts.
func newJob(r Request) *job {
	log := r.Logger
	if log == nil {
		log = slog.Default()
	}
	runner := r.Qemu
	if runner == nil {
		runner = &qemu.Runner{Logger: log}
	}
	confinement := runner.Sandbox()
	log.Info("qemu-img sandbox", "sandbox", confinement)
	scratch := r.ScratchDir
	if scratch == "" {
		scratch = os.TempDir()
	}
	j := &job{
		opts:       r,
		log:        log,
		qemu:       runner,
		source:     r.Source,
		checksums:  r.Checksums,
		scratchDir: scratch,
		result:     Result{Target: r.Target, Sandbox: confinement},
	}
	j.phase.Store(string(Info))
	return j
}

// steps are the phases' work, for the plan Info decided.
func (j *job) steps(plan *Plan) map[Phase]Step {
	j.plan = plan
	return map[Phase]Step{
		TransferDataFile: j.transferDataFile,
		TransferDataDir:  j.transferDataDir,
		TransferScratch:  j.transferScratch,
		Validate:         j.validate,
		Convert:          j.convert,
		Resize:           j.resize,
		Verify:           j.verify,
		Commit:           j.commit,
	}
}

// observe keeps the phase for progress reports and passes every event on
// to Request.Events.
func (j *job) observe(e Event) {
	if e.Kind == PhaseStarted {
		j.phase.Store(string(e.Phase))
	}
	if j.opts.Events != nil {
		j.opts.Events(e)
	}
}

// commit makes the target durable under its final name: only then is the
// import Complete. An archive is moved into place from its staging
// directory.
func (j *job) commit(ctx context.Context) error {
	if j.plan.Route == RouteArchive {
		return j.commitArchive(ctx) // archive.go
	}
	if err := j.tgt.Commit(ctx); err != nil {
		return err
	}
	j.log.Info("Successfully completed fsync, committed to disk", "target", j.tgt.Path())
	return nil
}

// classify makes sure a failure caused by cancellation says so, and that
// every error names what the import was doing.
func (j *job) classify(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, errdefs.ErrCancelled) {
		err = fmt.Errorf("%w: %w", errdefs.ErrCancelled, err)
	}
	// A full target (ENOSPC/EDQUOT from our writes, or qemu-img's message)
	// is a target that is too small, as CDI's controller reads it too; a
	// full scratch directory keeps its own error.
	if !errors.Is(err, errdefs.ErrTargetTooSmall) && !errors.Is(err, errdefs.ErrScratchSpaceRequired) && outOfSpace(err) {
		err = fmt.Errorf("%w: %w", errdefs.ErrTargetTooSmall, err)
	}
	return err
}

func outOfSpace(err error) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "no space left on device") || strings.Contains(msg, "disk quota exceeded")
}
