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
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/qemu"
)

// vhdRounding bounds the shortfall that VHD's CHS rounding explains: a
// VHD's virtual size is cylinders × heads × sectors per track, rounded up
// to a whole cylinder of at most 16 heads × 255 sectors of 512 bytes (qemu-img
// create -f vpc 100M gives 104865792 bytes, 8192 past 100 MiB).
const vhdRounding = 16 * 255 * 512

// importOnce is one attempt. The source is the request's across attempts:
// it carries the retry budget and count.
func importOnce(ctx context.Context, r request, start time.Time) (*Result, error) {
	a := newAttempt(r)
	defer a.cleanup()

	m := &machine{Logger: a.log, Observe: a.observe, Wrap: r.Wrap}
	stopProgress := a.startProgress(ctx)
	_, phases, err := m.Run(ctx, a.info, a.steps)
	stopProgress()

	a.result.Phases = phases
	a.result.Duration = time.Since(start)
	a.result.BytesRead = a.meter.bytesRead()
	if err != nil {
		err = classify(ctx, err)
		a.result.VirtualSize = failedVirtualSize(a.result.VirtualSize, err)
		a.result.PreallocationApplied = false // the target is aborted
		var se *errdefs.SizeError
		if errors.As(err, &se) && a.result.SourceFormat == string(format.VHD) && se.ImageSize > se.TargetSize && se.ImageSize-se.TargetSize <= vhdRounding {
			err = fmt.Errorf("%w (a VHD's size is rounded up to a disk geometry, a little past the disk it was made from: %d bytes more take it)",
				err, se.ImageSize-se.TargetSize)
		}
		a.abort()
		a.result.TargetState = a.targetState()
		return &a.result, err
	}
	a.result.Complete = true
	return &a.result, nil
}

// newAttempt sets up one attempt; the target is opened in the Info phase so
// a busy device is refused before any download starts.
func newAttempt(r request) *attempt {
	log := r.Logger
	if log == nil {
		log = slog.Default()
	}
	runner := r.Qemu
	if runner == nil {
		runner = &qemu.Runner{Logger: log}
	}
	if r.ScratchDir == "" && !r.NoScratch {
		r.ScratchDir = os.TempDir()
	}
	a := &attempt{
		req:    r,
		log:    log,
		qemu:   runner,
		result: Result{Target: r.Target},
	}
	a.meter.phase.Store(string(PhaseInfo))
	return a
}

// qemuImg is the runner of qemu-img for a phase about to run it: the
// first call of an attempt names the confinement in the result and the
// log, so an import whose route never runs qemu-img (a stream, a clone, a
// raw blank disk) reports no sandbox it did not use.
func (a *attempt) qemuImg() *qemu.Runner {
	if a.result.Sandbox == "" {
		a.result.Sandbox = a.qemu.Sandbox()
		a.log.Info("qemu-img sandbox", "sandbox", a.result.Sandbox)
	}
	return a.qemu
}

// classify makes sure a failure caused by cancellation says so, and that
// every error names what the import was doing.
func classify(ctx context.Context, err error) error {
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

// failedVirtualSize is the virtual size a failed import reports: the one
// it found, or, when the image was refused for its size before that was
// recorded, the size the refusal names (not a stream cut off at the end of
// the target: its size is not known).
func failedVirtualSize(found int64, err error) int64 {
	var se *errdefs.SizeError
	if found > 0 || !errors.As(err, &se) || se.What == "image data" {
		return found
	}
	return se.ImageSize
}

// maxRestarts is a backstop only: every restart also spends one of the
// source's retries, which is the real bound.
const maxRestarts = 100

// importWithRestarts runs import attempts until one ends without asking to
// start over. A source that cannot resume a broken transfer (the server
// ignores Range, or the object changed) fails the attempt with a
// *datasource.RestartError; that attempt has already aborted its target and
// removed its scratch file, so the next one begins from Info with a fresh
// Open and nothing of the old bytes. An attempt whose route found, only
// while running, that it cannot take the import (routeClosedError: a
// layout the stream decoder cannot follow, a target that is not the delta
// base named) is started over the same way, once, with that route closed
// in the request (closeRoute): the request is all the attempts share.
// Only a source that can be read again is started over (a one-time stream
// fails): clusters ahead of their tables spill to the scratch directory,
// so the decoder's restart is for layouts it cannot follow at all, or an
// overflow with no usable scratch directory (which the scratch route then
// reports as ErrScratchSpaceRequired).
func importWithRestarts(ctx context.Context, r request) (*Result, error) {
	start := time.Now()
	for restarts := 0; ; restarts++ {
		res, err := importOnce(ctx, r, start)
		res.Retries = sourceRetries(r.Source)
		var rc *routeClosedError
		if err != nil && ctx.Err() == nil && errors.As(err, &rc) {
			if then := r.closeRoute(rc.route); then != "" {
				// That attempt wrote nothing that stays: the next one
				// reads the source again and plans without the route.
				logger(r).Warn(then, "source", r.Source.String(), "target", r.Target, "cause", rc.Error())
				continue
			}
		}
		var re *datasource.RestartError
		if err == nil || ctx.Err() != nil || !errors.As(err, &re) || restarts >= maxRestarts {
			return res, err
		}
		logger(r).Warn("Transfer cannot resume; starting the import over from the beginning", re.Told(restarts+1, r.Source.String()))
	}
}

// routeClosedError fails an attempt whose route cannot take the import,
// found only while it ran: the restart loop starts the import over with
// the route closed (request.closeRoute).
type routeClosedError struct {
	route routeKind
	err   error
}

func (e *routeClosedError) Error() string { return e.err.Error() }
func (e *routeClosedError) Unwrap() error { return e.err }

// closeRoute closes route in r for the attempts to come and says what
// they do instead, or returns "" when it was closed already.
func (r *request) closeRoute(route routeKind) string {
	switch {
	case route == routeStreamDecode && !r.NoStreamDecode:
		r.NoStreamDecode = true // over ranges, or through scratch
		return "The image cannot be decoded in one pass; starting the import over through qemu-img"
	case route == routeDelta && r.Delta && r.DeltaReceived == nil:
		r.Delta = false
		return "The target is not the delta base; cloning in full"
	}
	return ""
}

func logger(r request) *slog.Logger {
	if r.Logger == nil {
		return slog.Default()
	}
	return r.Logger
}
