package main

import (
	"fmt"
	"io"
	"log/slog"
)

// Log formats of --log-format and IMPORTER_LOG_FORMAT.
const (
	logFormatText = "text"
	logFormatJSON = "json"
)

// logFormats are the values --log-format takes (and completes).
var logFormats = []string{logFormatText, logFormatJSON}

// newLogger is a text logger (newFormatLogger with "text").
func newLogger(w io.Writer, verbose int, quiet bool) *slog.Logger {
	log, _ := newFormatLogger(w, logFormatText, verbose, quiet)
	return log
}

// newFormatLogger builds the logger of a run: slog's text or JSON handler
// on w, at debug level with -v, warnings only with -q, else info.
func newFormatLogger(w io.Writer, format string, verbose int, quiet bool) (*slog.Logger, error) {
	level := slog.LevelInfo
	switch {
	case quiet:
		level = slog.LevelWarn
	case verbose > 0:
		level = slog.LevelDebug
	}
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "", logFormatText:
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case logFormatJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}

// envLogger is env mode's logger: IMPORTER_LOG_FORMAT=json gives JSON
// lines; any other value is warned about and text is kept, since a pod
// must not fail over how it logs.
func envLogger(w io.Writer, getenv func(string) string, verbose int, quiet bool) *slog.Logger {
	format := getenv("IMPORTER_LOG_FORMAT")
	log, err := newFormatLogger(w, format, verbose, quiet)
	if err != nil {
		log = newLogger(w, verbose, quiet)
		log.Warn("IMPORTER_LOG_FORMAT ignored", "err", err)
	}
	return log
}
