package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/diskimport/engine/errdefs"
)

// Log formats of --log-format and IMPORTER_LOG_FORMAT.
const (
	logFormatText = "text"
	logFormatJSON = "json"
)

// logFormats are the values --log-format takes (and completes).
var logFormats = []string{logFormatText, logFormatJSON}

// newLogger is a text logger at info level, debug with -v, warnings with -q.
func newLogger(w io.Writer, verbose int, quiet bool) *slog.Logger {
	log, _ := newFormatLogger(w, logFormatText, logLevel(verbose, quiet))
	return log
}

// logLevel is the level of env mode and the subcommands: info, debug with
// -v, warnings only with -q.
func logLevel(verbose int, quiet bool) slog.Level {
	switch {
	case quiet:
		return slog.LevelWarn
	case verbose > 0:
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// checkLogFormat refuses a --log-format other than text or json.
func checkLogFormat(format string) error {
	_, err := newFormatLogger(io.Discard, format, slog.LevelInfo)
	return err
}

// newFormatLogger builds a logger with slog's text or JSON handler on w.
func newFormatLogger(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "", logFormatText:
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case logFormatJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json: %w", format, errdefs.ErrInvalidOptions)
}

// envLogger is env mode's logger: IMPORTER_LOG_FORMAT=json gives JSON
// lines; any other value is warned about and text is kept, since a pod
// must not fail over how it logs.
func envLogger(w io.Writer, getenv func(string) string, verbose int, quiet bool) *slog.Logger {
	format := getenv("IMPORTER_LOG_FORMAT")
	log, err := newFormatLogger(w, format, logLevel(verbose, quiet))
	if err != nil {
		log = newLogger(w, verbose, quiet)
		log.Warn("IMPORTER_LOG_FORMAT ignored", "err", err)
	}
	return log
}
