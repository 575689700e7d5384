package main

import (
	"io"
	"log/slog"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cdi"
)

// progressOutputs are the readers of an import's progress: the tracker
// behind the metrics server, the periodic log line (off a terminal) and the
// terminal's status line (on one).
type progressOutputs struct {
	tracker  *cdi.ProgressTracker
	server   *cdi.MetricsServer
	logLines *cdi.ProgressLog
	terminal *terminalProgress
	log      *slog.Logger
}

// startProgressOutputs starts them: the metrics server when metrics is
// enabled (a port that cannot be had is logged, not fatal: the import
// matters more than its progress, and CDI's importer does the same), and
// the log lines or the terminal's line unless quiet.
func startProgressOutputs(metrics cdi.MetricsConfig, log *slog.Logger, stderr io.Writer, quiet bool) *progressOutputs {
	o := &progressOutputs{tracker: cdi.NewProgressTracker(), log: log}
	if metrics.Enabled() {
		srv, err := cdi.StartMetricsServer(metrics, cdi.NewMetricsHandler(o.tracker, metrics.OwnerUID))
		if err != nil {
			log.Warn("Progress metrics not served", "err", err)
		} else {
			o.server = srv
			log.Info("Serving progress metrics over HTTPS", "addr", srv.Addr(), "metric", cdi.ProgressMetricName, "ownerUID", metrics.OwnerUID)
		}
	}
	switch {
	case quiet:
	case isTerminal(stderr):
		o.terminal = newTerminalProgress(stderr)
	default:
		o.logLines = cdi.StartProgressLog(o.tracker, log, cdi.ProgressLogInterval)
	}
	return o
}

// observe is the import's importer.Options.Progress.
func (o *progressOutputs) observe(p importer.Progress) {
	o.tracker.Observe(p)
	if o.terminal != nil {
		o.terminal.update(p)
	}
}

// finish records the outcome (100% only for a complete import) and stops
// everything.
func (o *progressOutputs) finish(res *importer.Result, err error) {
	if res != nil {
		o.tracker.SetRetries(res.Retries)
	}
	if err == nil {
		o.tracker.Complete()
	}
	if o.logLines != nil {
		o.logLines.Stop()
	}
	if o.server != nil {
		stop := o.server.Stop
		if err == nil {
			stop = func() error { return o.server.StopAfterScrape(cdi.FinalScrapeGrace) }
		}
		if err := stop(); err != nil {
			o.log.Warn("Stopping the metrics server", "err", err)
		}
	}
}
