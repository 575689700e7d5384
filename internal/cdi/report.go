package cdi

import (
	"os"
	"path/filepath"

	"github.com/diskimport/engine/importer"
)

// Report ends a run under CDI's contract: it writes the termination message
// for res and err to paths.TerminationLog and returns the exit code. A
// success whose message cannot be written is a failure (exit 1), since the
// controller learns the result only from that file; writeErr says why, for
// the log.
func Report(paths Paths, res *importer.Result, err error) (code int, writeErr error) {
	writeErr = writeTerminationLog(paths.TerminationLog, NewTerminationMessage(res, err).JSON())
	if writeErr != nil && err == nil {
		return ExitFailed, writeErr
	}
	return ExitCode(err), writeErr
}

// writeTerminationLog writes msg as the whole file, creating its directory
// (under IMPORTER_PATH_PREFIX, /dev may not exist yet).
func writeTerminationLog(path string, msg []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, msg, 0o600)
}
