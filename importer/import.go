package importer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/engine"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/qemu"
)

// Import copies the image named by o.Source onto o.Target, converting it to
// raw (or qcow2 for a file target that asks for it), and grows a file target
// to the requested size. It reports success only when the target holds the
// complete, verified image and has been synced. On failure the returned
// error wraps one of the package's Err values and the Result says how far
// the import got; the target is never reported complete.
func Import(ctx context.Context, o Options) (*Result, error) {
	return importWithRestarts(ctx, o) // restart.go: re-runs importOnce when a transfer must start over
}

// importOnce is one attempt of Import; src, when set, is the source of an
// earlier attempt (it carries the retry budget and count).
func importOnce(ctx context.Context, o Options, src datasource.Source, start time.Time) (*Result, datasource.Source, error) {
	j, err := newJob(o)
	if err != nil {
		return &Result{Target: o.Target}, nil, err
	}
	if src != nil {
		j.source = src
	}
	src = j.source
	defer j.cleanup()

	m := &engine.Machine{Logger: j.log, Observe: j.observe, Wrap: o.wrapPhase}
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
		return &j.result, src, err
	}
	j.result.Complete = true
	return &j.result, src, nil
}

// newJob checks the options and builds the source; the target is opened in
// the Info phase so a busy device is refused before any download starts.
func newJob(o Options) (*job, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	if o.Source == "" || o.Target == "" {
		return nil, fmt.Errorf("source and target are required: %w", errdefs.ErrInvalidOptions)
	}
	switch o.Format {
	case "", "raw", "qcow2":
	default:
		return nil, fmt.Errorf("target format %q: want raw or qcow2: %w", o.Format, errdefs.ErrInvalidOptions)
	}
	if o.FilesystemOverhead < 0 || o.FilesystemOverhead >= 1 {
		return nil, fmt.Errorf("filesystem overhead %v: want a fraction in [0, 1): %w", o.FilesystemOverhead, errdefs.ErrInvalidOptions)
	}
	var sums []iostage.Checksum
	for _, s := range o.Checksums {
		c, err := iostage.ParseChecksum(s)
		if err != nil {
			return nil, err
		}
		sums = append(sums, c)
	}
	src, err := newSource(o)
	if err != nil {
		return nil, err
	}
	runner := o.Qemu
	if runner == nil {
		runner = &qemu.Runner{Logger: log}
	}
	confinement := runner.Sandbox()
	log.Info("qemu-img sandbox", "sandbox", confinement)
	scratch := o.ScratchDir
	if scratch == "" {
		scratch = os.TempDir()
	}
	j := &job{
		opts:       o,
		log:        log,
		qemu:       runner,
		source:     src,
		checksums:  sums,
		scratchDir: scratch,
		result:     Result{Target: o.Target, Sandbox: confinement},
	}
	j.phase.Store(string(engine.Info))
	return j, nil
}

// newSource builds the import's source through the datasource registry:
// every scheme gets the same Config, whichever entry point the endpoint came
// through. An upload body handed in by the caller is a stream of its own.
func newSource(o Options) (datasource.Source, error) {
	if o.Source == "-" && o.SourceReader != nil {
		return datasource.NewReader("upload", o.SourceReader), nil
	}
	return datasource.New(o.Source, sourceConfig(o))
}

// sourceConfig is the part of the options that configures a source.
func sourceConfig(o Options) datasource.Config {
	return datasource.Config{
		Username:        o.Username,
		Password:        o.Password,
		Headers:         o.Headers,
		CertDir:         o.CertDir,
		InsecureTLS:     o.InsecureTLS,
		StallTimeout:    o.StallTimeout,
		Retries:         o.Retries,
		RetryBackoff:    o.RetryBackoff,
		RetryMaxElapsed: o.RetryMaxElapsed,
		Logger:          o.Logger,
		Arch:            o.Arch,
		AuthFile:        o.AuthFile,
		RegistriesConf:  o.RegistriesConf,
		TempDir:         o.ScratchDir,
	}
}

// steps are the phases' work, for the plan Info decided.
func (j *job) steps(plan *engine.Plan) map[engine.Phase]engine.Step {
	j.plan = plan
	return map[engine.Phase]engine.Step{
		engine.TransferDataFile: j.transferDataFile,
		engine.TransferDataDir:  j.transferDataDir,
		engine.TransferScratch:  j.transferScratch,
		engine.Validate:         j.validate,
		engine.Convert:          j.convert,
		engine.Resize:           j.resize,
		engine.Verify:           j.verify,
		engine.Commit:           j.commit,
	}
}

// observe keeps the phase for progress reports and passes every event on
// to Options.Events.
func (j *job) observe(e engine.Event) {
	if e.Kind == engine.PhaseStarted {
		j.phase.Store(string(e.Phase))
	}
	if j.opts.Events != nil {
		j.opts.Events(e)
	}
}

// commit makes the target durable under its final name: only then is the
// import Complete. An archive was moved into place by TransferDataDir's
// staging, which it commits here.
func (j *job) commit(ctx context.Context) error {
	if j.plan.Route == engine.RouteArchive {
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
