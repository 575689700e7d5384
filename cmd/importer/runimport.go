package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/importer"
)

// runImport runs one import from the command line and reports it. The
// engine's log is quiet by default (warnings; -v for its phases, -vv for
// debug): a person sees the progress bar, or a progress line every few
// seconds off a terminal, and one final line. On a terminal, without -v,
// --json or --log-format json, a source's retry is one sentence above the
// bar (retrySentences), not a WARN record.
func runImport(ctx context.Context, o importer.Options, f cliFlags, stdout, stderr io.Writer) int {
	metrics := cdi.MetricsConfig{Listen: "off"}
	if f.metricsListen != "" {
		metrics = cdi.MetricsConfig{Listen: f.metricsListen, OwnerUID: f.ownerUID}
	}
	progress := newProgressOutputs(stderr, f.quiet)
	w := progress.logWriter(stderr)
	log, err := newFormatLogger(w, f.logFormat, cliLogLevel(f.verbose, f.quiet))
	if err != nil {
		progress.finish(nil, err)
		return cdi.ExitUsage
	}
	if progress.terminal != nil && !f.json && f.verbose == 0 && f.logFormat != logFormatJSON {
		log = slog.New(retrySentences{next: log.Handler(), w: w})
	}
	lines, _ := newFormatLogger(w, f.logFormat, slog.LevelInfo)
	progress.start(metrics, log, lines, f.quiet)
	o.Logger = log
	o.Progress = progress.observe
	res, err := importer.Import(ctx, o)
	err = withCLIHint(err)
	progress.finish(res, err)
	r := reporter{terminationLog: f.terminationLog, json: f.json, quiet: f.quiet, stdout: stdout, stderr: stderr}
	if f.logFormat == logFormatJSON {
		r.records = lines
	}
	return r.report(res, err, "import failed", importSummary(res))
}

// withCLIHint adds to err the command line's way out of it, where there is
// one: the engine's errors name no switch, since the library, env mode and
// the upload server have other ones (Options.FormatIn) or none (CDI).
func withCLIHint(err error) error {
	var se *importer.SizeError
	switch {
	case errors.Is(err, importer.ErrTextNotImage):
		return fmt.Errorf("%w; --format-in raw imports it as a raw disk anyway", err)
	case errors.As(err, &se) && se.FreeSpace:
		return fmt.Errorf("%w, or --allow-sparse-overcommit writes the sparse image anyway (the write fails if its data do not fit)", err)
	}
	return err
}

// cliLogLevel is the level of the command line's log: warnings by default
// and with -q, the engine's phases with -v, debug with -vv.
func cliLogLevel(verbose int, quiet bool) slog.Level {
	switch {
	case quiet || verbose == 0:
		return slog.LevelWarn
	case verbose == 1:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
