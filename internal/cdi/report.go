package cdi

import (
	"os"
	"path/filepath"

	"github.com/diskimport/engine/importer"
)

// Report ends a run under CDI's contract: it writes the termination message
// for res and err to paths.TerminationLog and returns the exit code. kind
// is what the run was asked to do (it names a blank disk's failure as CDI
// does). A success whose message cannot be written is a failure (exit 1),
// since the controller learns the result only from that file; writeErr
// says why, for the log.
func Report(paths Paths, kind Kind, res *importer.Result, err error) (code int, writeErr error) {
	code = ExitCode(err)
	writeErr = writeTerminationLog(paths.TerminationLog, TerminationLog(kind, res, err))
	if writeErr != nil && err == nil {
		return ExitFailed, writeErr
	}
	return code, writeErr
}

// TerminationLog is what the termination log holds after a run. CDI's
// controller parses JSON only from a pod that exited 0 (success, scratch
// space required, checksum mismatch); after a non-zero exit it shows the
// text as it is, so a failure is written as plain text (FailureText).
func TerminationLog(kind Kind, res *importer.Result, err error) []byte {
	if ExitCode(err) == ExitOK {
		return NewTerminationMessage(res, err).JSON()
	}
	return []byte(FailureText(kind, err))
}

// writeTerminationLog writes msg as the whole file, creating its directory
// (under IMPORTER_PATH_PREFIX, /dev may not exist yet).
func writeTerminationLog(path string, msg []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, msg, 0o600)
}
