package main

import (
	"io"
	"log/slog"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/importer"
)

// progressOutputs are the readers of an import's progress: the tracker
// behind the metrics server and everything else, the periodic log line
// (off a terminal) and the progress bar (on one).
type progressOutputs struct {
	tracker  *cdi.ProgressTracker
	server   *cdi.MetricsServer
	logLines *cdi.ProgressLog
	terminal *terminalBar
	log      *slog.Logger
}

// newProgressOutputs decides where progress goes: a bar when stderr is a
// terminal, else log lines (started by start), nothing when quiet.
func newProgressOutputs(stderr io.Writer, quiet bool) *progressOutputs {
	o := &progressOutputs{tracker: cdi.NewProgressTracker()}
	if !quiet && isTerminal(stderr) {
		o.terminal = newTerminalBar(stderr)
	}
	return o
}

// logWriter is where the log lines go: above the bar on a terminal.
func (o *progressOutputs) logWriter(stderr io.Writer) io.Writer {
	if o.terminal != nil {
		return o.terminal
	}
	return stderr
}

// start starts the metrics server when metrics is enabled (a port that
// cannot be had is logged, not fatal: the import matters more than its
// progress, and CDI's importer does the same) and, off a terminal and
// unless quiet, the periodic progress lines on lines.
func (o *progressOutputs) start(metrics cdi.MetricsConfig, log, lines *slog.Logger, quiet bool) {
	o.log = log
	if metrics.Enabled() {
		srv, err := cdi.StartMetricsServer(metrics, cdi.NewMetricsHandler(o.tracker, metrics.OwnerUID))
		if err != nil {
			log.Warn("Progress metrics not served", "err", err)
		} else {
			o.server = srv
			log.Info("Serving progress metrics over HTTPS", "addr", srv.Addr(), "metric", cdi.ProgressMetricName, "ownerUID", metrics.OwnerUID)
		}
	}
	if !quiet && o.terminal == nil {
		o.logLines = cdi.StartProgressLog(o.tracker, lines, cdi.ProgressLogInterval)
	}
}

// observe is the import's importer.Options.Progress.
func (o *progressOutputs) observe(p importer.Progress) {
	o.tracker.Observe(p)
	if o.terminal != nil {
		o.terminal.update(o.tracker.State())
	}
}

// finish stops everything and records the outcome (100% only for a
// complete import); the bar has drawn its last frame when it returns. The
// metrics server stops first and at once, before the final value exists,
// so nothing waits for a scrape of it: CDI's controller sets a
// DataVolume's progress to 100% when the pod succeeds, not from a scrape
// (datavolume/import-controller.go, populators/import-populator.go
// updateImportProgress), and a wait for one kept every import's pod up a
// second longer (a qcow2 on the device in 0.61 s ended as a pod in 1.62 s).
func (o *progressOutputs) finish(res *importer.Result, err error) {
	if o.server != nil {
		if err := o.server.Stop(); err != nil {
			o.log.Warn("Stopping the metrics server", "err", err)
		}
	}
	if res != nil {
		o.tracker.SetRetries(res.Retries)
	}
	if err == nil {
		o.tracker.Complete()
	}
	if o.terminal != nil {
		o.terminal.update(o.tracker.State())
		o.terminal.finish(err == nil)
	}
	if o.logLines != nil {
		o.logLines.Stop()
	}
}

// startEnvProgress is env mode's: the metrics server and progress lines in
// the log, whatever stderr is (kubectl logs reads lines).
func startEnvProgress(metrics cdi.MetricsConfig, log *slog.Logger) *progressOutputs {
	o := &progressOutputs{tracker: cdi.NewProgressTracker()}
	o.start(metrics, log, log, false)
	return o
}
