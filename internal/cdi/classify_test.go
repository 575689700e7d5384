package cdi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
)

func TestClassifyAndExitCodes(t *testing.T) {
	for _, tc := range []struct {
		err      error
		class    Class
		env, cli int
	}{
		{nil, Succeeded, ExitOK, ExitOK},
		{fmt.Errorf("sha256: %w", errdefs.ErrChecksumMismatch), ChecksumMismatch, ExitOK, ExitFailed},
		{fmt.Errorf("--size: %w", errdefs.ErrInvalidOptions), InvalidOptions, ExitFailed, ExitUsage},
		{errdefs.ErrUnsafeImage, BadImage, ExitFailed, ExitFailed},
		{errdefs.ErrUnsupportedFormat, BadImage, ExitFailed, ExitFailed},
		{errdefs.ErrInvalidImage, BadImage, ExitFailed, ExitFailed},
		{errdefs.ErrScratchSpaceRequired, ScratchSpaceRequired, ExitFailed, ExitFailed},
		{&errdefs.SizeError{ImageSize: 2, TargetSize: 1}, TargetTooSmall, ExitFailed, ExitFailed},
		{&errdefs.HTTPStatusError{StatusCode: 404}, SourceFailed, ExitFailed, ExitFailed},
		{errdefs.ErrSourceUnreachable, SourceFailed, ExitFailed, ExitFailed},
		{errdefs.ErrTargetBusy, TargetBusy, ExitFailed, ExitFailed},
		{errdefs.ErrCancelled, Cancelled, ExitFailed, ExitFailed},
		{errors.New("checksum mismatch"), Failed, ExitFailed, ExitFailed}, // text alone means nothing
		// A cancelled upload server wraps the last attempt's cause, which wins.
		{fmt.Errorf("stopped: %w: last attempt: %w", errdefs.ErrCancelled, errdefs.ErrChecksumMismatch), ChecksumMismatch, ExitOK, ExitFailed},
	} {
		assert.Equal(t, tc.class, Classify(tc.err), "%v", tc.err)
		assert.Equal(t, tc.env, ExitCode(tc.err), "env mode: %v", tc.err)
		assert.Equal(t, tc.cli, CLIExitCode(tc.err), "command line: %v", tc.err)
	}
}

func TestReportWritesTheMessage(t *testing.T) {
	p := PathsFromEnv(envOf(map[string]string{"IMPORTER_PATH_PREFIX": t.TempDir()}))
	code, werr := Report(p, &importer.Result{SourceFormat: "raw"}, nil)
	require.NoError(t, werr)
	assert.Equal(t, ExitOK, code)
	b, err := os.ReadFile(p.TerminationLog)
	require.NoError(t, err)
	assert.JSONEq(t, string(NewTerminationMessage(&importer.Result{SourceFormat: "raw"}, nil).JSON()), string(b))

	code, werr = Report(p, nil, fmt.Errorf("bad: %w", errdefs.ErrChecksumMismatch))
	require.NoError(t, werr)
	assert.Equal(t, ExitOK, code, "a checksum mismatch exits 0 under the contract")
	b, err = os.ReadFile(p.TerminationLog)
	require.NoError(t, err)
	assert.Contains(t, string(b), "Unable to process data: bad: checksum mismatch")
}

// A success nobody can read about is a failure: the controller learns the
// result only from the termination log.
func TestReportUnwritableLogFails(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "dev")
	require.NoError(t, os.WriteFile(blocker, nil, 0o600)) // a file where the directory should be
	p := PathsFromEnv(envOf(map[string]string{"IMPORTER_PATH_PREFIX": dir}))
	code, werr := Report(p, &importer.Result{}, nil)
	assert.Error(t, werr)
	assert.Equal(t, ExitFailed, code)
	code, werr = Report(p, nil, errdefs.ErrChecksumMismatch)
	assert.Error(t, werr)
	assert.Equal(t, ExitOK, code, "the import's own outcome still decides")
}
