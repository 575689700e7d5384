package main

import (
	"fmt"
	"io"
	"os"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/cdi"
	"github.com/diskimport/engine/internal/units"
)

// reporter writes the outcome of a command for a person or a script: the
// result JSON to a termination log and/or standard output, and the cause
// or a one-line summary on standard error. (Env mode reports through
// cdi.Report instead.)
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
	msg := cdi.NewTerminationMessage(res, err).JSON()
	if werr := os.WriteFile(r.terminationLog, append(msg, '\n'), 0o600); werr != nil {
		fmt.Fprintln(r.stderr, "importer: writing termination log:", werr)
		return werr
	}
	return nil
}

// report writes everything and returns the exit code. failed prefixes the
// error ("import failed"); summary is printed on success unless quiet.
func (r reporter) report(res *importer.Result, err error, failed, summary string) int {
	if werr := r.writeLog(res, err); werr != nil && err == nil {
		return cdi.ExitFailed
	}
	if r.json {
		fmt.Fprintln(r.stdout, string(cdi.NewTerminationMessage(res, err).JSON()))
	}
	if err != nil {
		fmt.Fprintf(r.stderr, "importer: %s: %v\n", failed, err)
		return cdi.CLIExitCode(err)
	}
	if !r.quiet {
		fmt.Fprintln(r.stderr, summary)
	}
	return cdi.ExitOK
}

// importSummary is the success line of an import: "Import complete:
// disk.img, 2.0 GiB (qcow2.xz, 752.0 MiB read) in 4.1 s, 496.0 MiB/s",
// the rate being the image's size over the whole import.
func importSummary(res *importer.Result) string {
	if res == nil {
		return ""
	}
	secs := res.Duration.Seconds()
	return fmt.Sprintf("Import complete: %s, %s (%s%s, %s read) in %.1f s, %s", res.Target, units.Bytes(res.VirtualSize),
		res.SourceFormat, compressionSuffix(res.Compressions), units.Bytes(res.BytesRead), secs,
		units.Rate(averageRate(res.VirtualSize, res.Duration)))
}
