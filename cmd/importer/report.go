package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
)

// reporter writes the outcome of a command for a person or a script: the
// result JSON to a termination log and/or standard output, and the cause
// or a one-line summary on standard error.
type reporter struct {
	terminationLog string
	json, quiet    bool
	stdout, stderr io.Writer
}

// writeLog writes the result JSON to the termination log, when one is set.
func (r reporter) writeLog(res *importer.Result, err error) error {
	if r.terminationLog == "" {
		return nil
	}
	msg := res.TerminationMessage(err).JSON()
	if werr := os.WriteFile(r.terminationLog, append(msg, '\n'), 0o600); werr != nil {
		fmt.Fprintln(r.stderr, "importer: writing termination log:", werr)
		return werr
	}
	return nil
}

// report writes everything and returns the exit code. failed prefixes the
// error ("import failed"); summary is printed on success unless quiet.
func (r reporter) report(res *importer.Result, err error, failed, summary string) int {
	if res == nil {
		res = &importer.Result{}
	}
	if werr := r.writeLog(res, err); werr != nil && err == nil {
		return exitError
	}
	if r.json {
		fmt.Fprintln(r.stdout, string(res.TerminationMessage(err).JSON()))
	}
	if err != nil {
		fmt.Fprintf(r.stderr, "importer: %s: %v\n", failed, err)
		if errors.Is(err, errdefs.ErrInvalidOptions) {
			return exitUsage
		}
		return exitError
	}
	if !r.quiet {
		fmt.Fprintln(r.stderr, summary)
	}
	return exitOK
}

// importSummary is the success line of an import.
func importSummary(res *importer.Result) string {
	if res == nil {
		return ""
	}
	return fmt.Sprintf("Import complete: %s (%s%s, %d bytes) in %.1fs", res.Target, res.SourceFormat,
		compressionSuffix(res.Compressions), res.VirtualSize, res.Duration.Seconds())
}

// reportEnv ends a run under CDI's contract: the termination message goes
// to its fixed path. Like CDI, a checksum mismatch exits 0 with the message
// so the controller fails the import for good instead of retrying it.
func reportEnv(paths cdiPaths, res *importer.Result, err error, log *slog.Logger, stderr io.Writer, failed string) int {
	if res == nil {
		res = &importer.Result{}
	}
	msg := res.TerminationMessage(err).JSON()
	if werr := writeTerminationLog(paths.TerminationLog, msg); werr != nil {
		fmt.Fprintln(stderr, "importer: writing termination message:", werr)
		if err == nil {
			return exitError
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "importer: %s: %v\n", failed, err)
		if errors.Is(err, errdefs.ErrChecksumMismatch) {
			return exitOK
		}
		return exitError
	}
	log.Info("Import complete", "target", res.Target, "format", res.SourceFormat, "virtualSize", res.VirtualSize)
	return exitOK
}

func writeTerminationLog(path string, msg []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, msg, 0o600)
}
