package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
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
	// records, under --log-format json, gets the cause and the summary as
	// log records (an ERROR with error and reason, an INFO "Import
	// complete" with the result's numbers) in place of the plain lines,
	// so that every line of standard error is JSON.
	records *slog.Logger
}

// writeLog writes the result JSON to the termination log, when one is set.
func (r reporter) writeLog(res *importer.Result, err error) error {
	if r.terminationLog == "" {
		return nil
	}
	msg := cdi.CLIMessage(res, err).JSON()
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
		fmt.Fprintln(r.stdout, string(cdi.CLIMessage(res, err).JSON()))
	}
	if r.records != nil {
		done, _, _ := strings.Cut(summary, ":") // "Import complete", "Blank disk created"
		return r.reportRecords(res, err, failed, done)
	}
	if err != nil {
		if _, stopped := err.(*errdefs.CancelledError); stopped {
			fmt.Fprintf(r.stderr, "importer: %v\n", err) // "import cancelled" is the whole story
		} else {
			fmt.Fprintf(r.stderr, "importer: %s: %v\n", failed, err)
		}
		if left := targetLeft(res); left != "" {
			fmt.Fprintf(r.stderr, "importer: %s\n", left)
		}
		return cdi.CLIExitCode(err)
	}
	if !r.quiet {
		fmt.Fprintln(r.stderr, fitLine(summary, terminalWidth(r.stderr)))
	}
	return cdi.ExitOK
}

// fitLine breaks a summary longer than width (a terminal's columns; 0: no
// terminal) after its ", " or before its " in ", into lines of at most
// width where it can, the later ones indented, so that a terminal never
// wraps it mid-word (at 80 columns "… 28.1 MiB written) in 6.9 s, …" did).
func fitLine(s string, width int) string {
	if width <= 0 || len(s) <= width {
		return s
	}
	var lines []string
	for len(s) > width {
		cut := -1
		for i := 0; i+2 <= len(s) && i <= width; i++ {
			switch {
			case s[i] == ',' && s[i+1] == ' ' && i+1 <= width:
				cut = i + 1 // after ", "
			case strings.HasPrefix(s[i:], " in ") && i > 0:
				cut = i
			}
		}
		if cut <= 2 {
			break // nothing to break at: the terminal wraps it
		}
		lines = append(lines, strings.TrimRight(s[:cut], " "))
		s = "  " + strings.TrimLeft(s[cut:], " ")
	}
	return strings.Join(append(lines, s), "\n")
}

// terminalWidth is w's columns when w is a terminal, else 0.
func terminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	cols, _, err := terminalSize(f)
	if err != nil {
		return 0
	}
	return cols
}

// reportRecords is report's ending as JSON log records.
func (r reporter) reportRecords(res *importer.Result, err error, failed, done string) int {
	if err != nil {
		var state string
		if res != nil {
			state = res.TargetState
		}
		r.records.Error(failed, "error", err.Error(), "reason", importer.Reason(err), "httpStatus", cdi.HTTPStatus(err),
			"targetState", state, "target", targetLeft(res))
		return cdi.CLIExitCode(err)
	}
	if !r.quiet && res != nil {
		r.records.Info(done, "target", res.Target, "sourceFormat", res.SourceFormat,
			"compression", strings.Join(res.Compressions, ","), "virtualSize", res.VirtualSize, "targetSize", res.TargetSize,
			"bytesRead", res.BytesRead, "dataBytes", res.DataBytes, "durationSeconds", res.Duration.Seconds())
	}
	return cdi.ExitOK
}

// targetLeft says in words what a failed import left of its target, ""
// when it did not say (no result, or no target yet).
func targetLeft(res *importer.Result) string {
	if res == nil || res.Target == "" {
		return ""
	}
	switch res.TargetState {
	case importer.TargetUntouched:
		return fmt.Sprintf("nothing was written to %s", res.Target)
	case importer.TargetRemoved:
		return fmt.Sprintf("%s is as it was: the partial copy beside it was removed", res.Target)
	case importer.TargetWiped:
		return fmt.Sprintf("%s was written in part and its first MiB zeroed: it holds no usable image", res.Target)
	case importer.TargetPartial:
		return fmt.Sprintf("%s was updated in part, in place, and its first and last MiB zeroed: it holds no usable image (a full clone makes it whole)", res.Target)
	}
	return ""
}

// importSummary is the success line of an import: "Import complete:
// disk.img, 2.0 GiB, target 10.0 GiB (qcow2.xz, 752.0 MiB read, 1.1 GiB
// written) in 4.1 s, 183.4 MiB/s read, 274.7 MiB/s written". Each rate is
// bytes that moved over the whole import: received from the source, and
// data written to the target (zero runs left as holes or zeroed by the
// device are not); never the disk's size, which a sparse image or a grown
// target makes as large as it likes. The target's size is named when it
// differs from the image's, and what was written when it was counted.
func importSummary(res *importer.Result) string {
	if res == nil {
		return ""
	}
	size := units.Bytes(res.VirtualSize)
	if res.TargetSize > 0 && res.TargetSize != res.VirtualSize {
		size += ", target " + units.Bytes(res.TargetSize)
	}
	moved := units.Bytes(res.BytesRead) + " read"
	rates := units.Rate(averageRate(res.BytesRead, res.Duration)) + " read"
	if res.DataBytes > 0 {
		moved += ", " + units.Bytes(res.DataBytes) + " written"
		rates += ", " + units.Rate(averageRate(res.DataBytes, res.Duration)) + " written"
	}
	if d := res.Delta; d != nil {
		return fmt.Sprintf("Delta pass complete: %s, %s (%d of %d blocks changed, %s sent, %s as zeros) in %.1f s, %s", res.Target, size,
			d.BlocksChanged, d.Blocks, units.Bytes(d.DataBytes), units.Bytes(d.ZeroBytes), res.Duration.Seconds(), deltaKind(d))
	}
	return fmt.Sprintf("Import complete: %s, %s (%s%s, %s) in %.1f s, %s", res.Target, size,
		res.SourceFormat, compressionSuffix(res.Compressions), moved, res.Duration.Seconds(), rates)
}

// deltaKind says whether a delta pass was final.
func deltaKind(d *importer.DeltaPass) string {
	switch {
	case d.Received:
		return "received (whether it was final, the sender reports)"
	case d.Final:
		return "final (the source did not change during the pass)"
	}
	return "warm (the source changed during the pass: run another once it is quiesced)"
}
