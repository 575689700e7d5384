package cdi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/errtable"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// renderPromptly runs JSON with a deadline, so a truncation loop that never
// ends fails the test instead of hanging it.
func renderPromptly(t *testing.T, m TerminationMessage) []byte {
	t.Helper()
	done := make(chan []byte, 1)
	go func() { done <- m.JSON() }()
	select {
	case b := <-done:
		return b
	case <-time.After(5 * time.Second):
		t.Fatal("TerminationMessage.JSON did not return within 5s")
		return nil
	}
}

// decodeMessage checks the Kubernetes limits on b and decodes it.
func decodeMessage(t *testing.T, b []byte) map[string]any {
	t.Helper()
	require.LessOrEqual(t, len(b), 4096, "termination message over Kubernetes' limit")
	require.True(t, utf8.Valid(b), "termination message is not valid UTF-8")
	var got map[string]any
	require.NoError(t, json.Unmarshal(b, &got), "termination message is not JSON: %s", b)
	return got
}

func manyLabels(n int, value func(i int) string) map[string]string {
	labels := make(map[string]string, n)
	for i := range n {
		labels[fmt.Sprintf("instancetype.kubevirt.io/default-%04d", i)] = value(i)
	}
	return labels
}

func TestTerminationMessageFitsWithThousandLabels(t *testing.T) {
	cases := map[string]struct {
		labels map[string]string
		cause  error
	}{
		"1000 short labels, success": {
			labels: manyLabels(1000, func(i int) string { return fmt.Sprintf("u1.medium-%d", i) }),
		},
		"1000 huge label values, failure": {
			labels: manyLabels(1000, func(i int) string { return strings.Repeat("v<&>", 2000+i) }),
			cause:  errors.New("read source: connection reset by peer"),
		},
		"1000 labels and a huge error with multibyte runes and escapes": {
			labels: manyLabels(1000, func(i int) string { return strings.Repeat("é", i) }),
			cause:  errors.New("qcow2 check: " + strings.Repeat("L2 table «bad» <entry> \"quoted\"\n", 50000)),
		},
		"the cause alone is huge": {
			cause: errors.New(strings.Repeat("x", 1<<20)),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res := &importer.Result{Labels: tc.labels, SourceFormat: "qcow2", VirtualSize: 1 << 30}
			m := NewTerminationMessage(res, tc.cause)
			b := renderPromptly(t, m)
			got := decodeMessage(t, b)

			msg, _ := got["message"].(string)
			if tc.cause == nil {
				assert.Equal(t, MessageComplete, msg)
			} else {
				// The cause comes first: its beginning survives, whatever else is cut.
				require.True(t, strings.HasPrefix(msg, "Unable to process data: "+tc.cause.Error()[:20]), "message %q", msg)
			}
			assert.Equal(t, "qcow2", got["sourceFormat"])

			kept, _ := got["labels"].(map[string]any)
			omitted, _ := got["labelsOmitted"].(float64)
			assert.Equal(t, len(tc.labels), len(kept)+int(omitted), "every label is either kept or counted as omitted")
			for k, v := range kept {
				assert.Equal(t, tc.labels[k], v, "kept label %s is changed", k)
			}
			if len(tc.labels) > 0 && tc.cause == nil {
				assert.NotEmpty(t, kept, "short labels that fit are kept")
			}

			// Deterministic: map iteration order must not change the result.
			for range 5 {
				assert.Equal(t, string(b), string(renderPromptly(t, NewTerminationMessage(res, tc.cause))))
			}
		})
	}
}

func TestTerminationMessageSmallIsUntouched(t *testing.T) {
	res := &importer.Result{Labels: map[string]string{"a": "b"}}
	got := decodeMessage(t, NewTerminationMessage(res, errors.New("boom")).JSON())
	assert.Equal(t, "Unable to process data: boom", got["message"])
	assert.Equal(t, map[string]any{"a": "b"}, got["labels"])
	assert.NotContains(t, got, "labelsOmitted")
}

func TestTerminationMessageCarriesTheContentDigestBesideThousandLabels(t *testing.T) {
	d := "blk-sha256:" + strings.Repeat("ab", 32)
	labels := map[string]string{}
	for i := range 1000 {
		labels[fmt.Sprintf("label-%04d", i)] = strings.Repeat("v", 40)
	}
	b := NewTerminationMessage(&importer.Result{ContentDigest: d, Labels: labels}, nil).JSON()
	assert.LessOrEqual(t, len(b), 4096)
	assert.Equal(t, d, decodeMessage(t, b)["contentDigest"], "the digest is kept, labels give way")
}

func TestClassifyAndExitCodes(t *testing.T) {
	for _, tc := range []struct {
		err      error
		class    errtable.Class
		env, cli int
	}{
		{nil, errtable.Succeeded, ExitOK, ExitOK},
		{fmt.Errorf("sha256: %w", errdefs.ErrChecksumMismatch), errtable.ChecksumMismatch, ExitOK, ExitFailed},
		{fmt.Errorf("--size: %w", errdefs.ErrInvalidOptions), errtable.InvalidOptions, ExitFailed, ExitUsage},
		{errdefs.ErrUnsafeImage, errtable.BadImage, ExitFailed, ExitFailed},
		{errdefs.ErrUnsupportedFormat, errtable.BadImage, ExitFailed, ExitFailed},
		{errdefs.ErrInvalidImage, errtable.BadImage, ExitFailed, ExitFailed},
		{errdefs.ErrScratchSpaceRequired, errtable.ScratchSpaceRequired, ExitOK, ExitFailed}, // the controller adds scratch and recreates the pod
		{&errdefs.SizeError{ImageSize: 2, TargetSize: 1}, errtable.TargetTooSmall, ExitFailed, ExitFailed},
		{&errdefs.HTTPStatusError{StatusCode: 404}, errtable.SourceFailed, ExitFailed, ExitFailed},
		{errdefs.ErrSourceUnreachable, errtable.SourceFailed, ExitFailed, ExitFailed},
		{errdefs.ErrTargetBusy, errtable.TargetBusy, ExitFailed, ExitFailed},
		{errdefs.ErrCancelled, errtable.Cancelled, ExitFailed, ExitFailed},
		{errors.New("checksum mismatch"), errtable.Failed, ExitFailed, ExitFailed}, // text alone means nothing
		// A cancelled upload server wraps the last attempt's cause, which wins.
		{fmt.Errorf("stopped: %w: last attempt: %w", errdefs.ErrCancelled, errdefs.ErrChecksumMismatch), errtable.ChecksumMismatch, ExitOK, ExitFailed},
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

func TestMessageReasonAndHTTPStatus(t *testing.T) {
	err := fmt.Errorf("GET x: %w", &errdefs.HTTPStatusError{URL: "x", StatusCode: 404, Status: "404 Not Found"})
	m := NewTerminationMessage(&importer.Result{}, err)
	assert.Equal(t, "SourceRefused", m.Reason)
	assert.Equal(t, 404, m.HTTPStatus)
	assert.Contains(t, string(m.JSON()), `"reason":"SourceRefused","httpStatus":404`)

	ok := NewTerminationMessage(&importer.Result{Complete: true}, nil)
	assert.NotContains(t, string(ok.JSON()), "reason")
	assert.NotContains(t, string(ok.JSON()), "httpStatus")
	assert.Equal(t, "Cancelled", Reason(fmt.Errorf("%w: %w", errdefs.ErrCancelled, context.Canceled)))
}
