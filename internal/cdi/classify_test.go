package cdi

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

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
		{errdefs.ErrScratchSpaceRequired, ScratchSpaceRequired, ExitOK, ExitFailed}, // the controller adds scratch and recreates the pod
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
	code, werr := Report(p, Import, &importer.Result{SourceFormat: "raw"}, nil)
	require.NoError(t, werr)
	assert.Equal(t, ExitOK, code)
	b, err := os.ReadFile(p.TerminationLog)
	require.NoError(t, err)
	assert.JSONEq(t, string(NewTerminationMessage(&importer.Result{SourceFormat: "raw"}, nil).JSON()), string(b))

	code, werr = Report(p, Import, nil, fmt.Errorf("bad: %w", errdefs.ErrChecksumMismatch))
	require.NoError(t, werr)
	assert.Equal(t, ExitOK, code, "a checksum mismatch exits 0 under the contract")
	b, err = os.ReadFile(p.TerminationLog)
	require.NoError(t, err)
	assert.Equal(t, "Unable to process data: bad: checksum mismatch", decodeLog(t, b).Message, "exit 0: JSON the controller parses")
}

func decodeLog(t *testing.T, b []byte) TerminationMessage {
	t.Helper()
	var m TerminationMessage
	require.NoError(t, json.Unmarshal(b, &m), "not JSON: %s", b)
	return m
}

// After a non-zero exit CDI's controller shows the termination log as
// text, so a failure is plain text; the two exit-0 failures are JSON.
func TestReportFailuresAsCDIWritesThem(t *testing.T) {
	p := PathsFromEnv(envOf(map[string]string{"IMPORTER_PATH_PREFIX": t.TempDir()}))
	read := func() string {
		b, err := os.ReadFile(p.TerminationLog)
		require.NoError(t, err)
		return string(b)
	}

	code, werr := Report(p, Import, &importer.Result{}, fmt.Errorf("GET http://h/d: %w", &errdefs.HTTPStatusError{StatusCode: 404}))
	require.NoError(t, werr)
	assert.Equal(t, ExitFailed, code)
	assert.True(t, strings.HasPrefix(read(), "Unable to process data: GET http://h/d: "), read())
	assert.False(t, json.Valid([]byte(read())), "a failure is text, not JSON")

	_, err := ReadEnv(envOf(map[string]string{"IMPORTER_SOURCE": "vddk"}), p)
	code, _ = Report(p, Import, nil, err)
	assert.Equal(t, ExitFailed, code)
	assert.Equal(t, "IMPORTER_SOURCE=vddk is not supported by this importer (supported: http, s3, gcs, registry, clone, none and upload): invalid options", read())

	req, err := ReadEnv(envOf(map[string]string{"IMPORTER_SOURCE": "none", "IMPORTER_CONTENTTYPE": "archive"}), p)
	code, _ = Report(p, req.Kind, nil, err)
	assert.Equal(t, ExitFailed, code)
	assert.Equal(t, "Cannot create empty disk with content type archive", read())

	code, _ = Report(p, Blank, nil, errors.New("qemu-img create: no"))
	assert.Equal(t, ExitFailed, code)
	assert.Equal(t, "Unable to create blank image: qemu-img create: no", read())

	code, werr = Report(p, Import, &importer.Result{SourceFormat: "qcow2", PreallocationApplied: true},
		fmt.Errorf("%w: scratch directory /scratch is not usable", errdefs.ErrScratchSpaceRequired))
	require.NoError(t, werr)
	assert.Equal(t, ExitOK, code, "the controller recreates the pod with scratch space only after exit 0")
	m := decodeLog(t, []byte(read()))
	assert.True(t, m.ScratchSpaceRequired)
	assert.False(t, m.PreallocationApplied)
	assert.Contains(t, m.Message, "scratch directory /scratch is not usable")
}

// A failure's text keeps its cause (its start) within Kubernetes' limit,
// on one line, cut on a character boundary.
func TestFailureTextFits(t *testing.T) {
	cause := "the server said no"
	long := errors.New(cause + "\n" + strings.Repeat("é", 5000))
	text := FailureText(Import, long)
	assert.LessOrEqual(t, len(text), 4096)
	assert.True(t, strings.HasPrefix(text, "Unable to process data: "+cause+" é"), text[:60])
	assert.NotContains(t, text, "\n")
	assert.True(t, utf8.ValidString(text))
	assert.True(t, strings.HasSuffix(text, "…"))
	short := FailureText(Import, errors.New(cause))
	assert.Equal(t, "Unable to process data: "+cause, short)
}

// A success nobody can read about is a failure: the controller learns the
// result only from the termination log.
func TestReportUnwritableLogFails(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "dev")
	require.NoError(t, os.WriteFile(blocker, nil, 0o600)) // a file where the directory should be
	p := PathsFromEnv(envOf(map[string]string{"IMPORTER_PATH_PREFIX": dir}))
	code, werr := Report(p, Import, &importer.Result{}, nil)
	assert.Error(t, werr)
	assert.Equal(t, ExitFailed, code)
	code, werr = Report(p, Import, nil, errdefs.ErrChecksumMismatch)
	assert.Error(t, werr)
	assert.Equal(t, ExitOK, code, "the import's own outcome still decides")
}
