package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/cdi"
	"github.com/diskimport/engine/internal/testimg"
	"github.com/diskimport/engine/uploadserver"
)

// jsonLogLines checks that every log line of stderr is a JSON object (the
// final summary line and "importer:" causes are not log lines) and
// returns their messages.
func jsonLogLines(t *testing.T, stderr string) []string {
	t.Helper()
	var msgs []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if strings.HasPrefix(l, "Import complete:") || strings.HasPrefix(l, "importer:") || l == "" {
			continue
		}
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &rec), "not a JSON log line: %q", l)
		assert.Contains(t, rec, "time")
		assert.Contains(t, rec, "level")
		msgs = append(msgs, rec["msg"].(string))
	}
	return msgs
}

func TestCLILogFormatJSON(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "disk.raw", 1<<20, 4)
	code, _, stderr := runCLI(t, nil, env(nil), "-v", "--log-format", "json", src, filepath.Join(dir, "out.img"))
	require.Equal(t, cdi.ExitOK, code)
	assert.Contains(t, jsonLogLines(t, stderr), "New phase: TransferDataFile")
}

func TestEnvLogFormatJSON(t *testing.T) {
	dir := t.TempDir()
	testimg.Raw(t, dir, "disk.raw", 1<<20, 5)
	base := testimg.Serve(t, dir)
	root := cdiRoot(t)
	code, _, stderr := runCLI(t, nil, env(map[string]string{
		"IMPORTER_SOURCE":         "http",
		"IMPORTER_ENDPOINT":       base + "/disk.raw",
		"IMPORTER_PATH_PREFIX":    root,
		"IMPORTER_METRICS_LISTEN": "off",
		"IMPORTER_LOG_FORMAT":     "json",
	}))
	require.Equal(t, cdi.ExitOK, code)
	msgs := jsonLogLines(t, stderr)
	assert.Contains(t, msgs, "New phase: TransferDataFile")
	assert.Contains(t, msgs, "Import complete")
}

func TestBlankLogFormatJSON(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "blank.img")
	code, _, stderr := runCLI(t, nil, env(nil), "blank", "-v", "--log-format", "json", "--size", "1Mi", dest)
	require.Equal(t, cdi.ExitOK, code)
	assert.Contains(t, jsonLogLines(t, stderr), "Blank disk created", "the summary is a JSON record too")
	code, _, _ = runCLI(t, nil, env(nil), "blank", "--log-format", "xml", "--size", "1Mi", dest+"2")
	assert.Equal(t, cdi.ExitUsage, code)
}

// Under --log-format json every line of standard error is JSON: the
// summary is an INFO record with the result's numbers, the failure an
// ERROR record with the error and its reason.
func TestCLILogFormatJSONEndsInRecords(t *testing.T) {
	dir := t.TempDir()
	src := testimg.Raw(t, dir, "disk.raw", 1<<20, 4)
	code, _, stderr := runCLI(t, nil, env(nil), "--log-format", "json", src, filepath.Join(dir, "out.img"))
	require.Equal(t, cdi.ExitOK, code)
	recs := jsonRecords(t, stderr)
	last := recs[len(recs)-1]
	assert.Equal(t, "Import complete", last["msg"])
	assert.Equal(t, "raw", last["sourceFormat"])
	assert.EqualValues(t, 1<<20, last["virtualSize"])
	assert.EqualValues(t, 1<<20, last["bytesRead"])

	code, _, stderr = runCLI(t, nil, env(nil), "--log-format", "json", filepath.Join(dir, "nope.raw"), filepath.Join(dir, "x.img"))
	require.Equal(t, cdi.ExitFailed, code)
	recs = jsonRecords(t, stderr)
	last = recs[len(recs)-1]
	assert.Equal(t, "ERROR", last["level"])
	assert.Equal(t, "import failed", last["msg"])
	assert.Equal(t, "source file "+filepath.Join(dir, "nope.raw")+" does not exist", last["error"])
	assert.Equal(t, "SourceUnreachable", last["reason"])
}

// Under --log-format json the upload server's ending is a record as the
// import's: "Import complete" with the result's numbers after an upload,
// an ERROR with error and reason when it is stopped.
func TestUploadServerLogFormatJSONEndsInRecords(t *testing.T) {
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 1<<20, 4)
	serve := func(ctx context.Context, addr string) (<-chan int, *bytes.Buffer) {
		var stderr bytes.Buffer
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"upload-server", "--log-format", "json", "--listen", addr, filepath.Join(dir, "out.img")},
				nil, io.Discard, &stderr, env(nil))
		}()
		return done, &stderr
	}

	addr := freeAddr(t)
	done, stderr := serve(context.Background(), addr)
	waitHealthy(t, http.DefaultClient, "http://"+addr)
	require.Equal(t, http.StatusOK, uploadFile(t, http.DefaultClient, "http://"+addr+uploadserver.PathUpload, raw, ""))
	require.Equal(t, cdi.ExitOK, waitExit(t, done))
	recs := jsonRecords(t, stderr.String())
	last := recs[len(recs)-1]
	assert.Equal(t, "Import complete", last["msg"])
	assert.Equal(t, "raw", last["sourceFormat"])
	assert.EqualValues(t, 1<<20, last["virtualSize"])
	assert.EqualValues(t, 1<<20, last["bytesRead"])
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, filepath.Join(dir, "out.img"), -1))

	ctx, cancel := context.WithCancel(context.Background())
	addr = freeAddr(t)
	done, stderr = serve(ctx, addr)
	waitHealthy(t, http.DefaultClient, "http://"+addr)
	cancel()
	assert.NotEqual(t, cdi.ExitOK, waitExit(t, done))
	recs = jsonRecords(t, stderr.String())
	last = recs[len(recs)-1]
	assert.Equal(t, "ERROR", last["level"])
	assert.Equal(t, "upload-server", last["msg"])
	assert.NotEmpty(t, last["error"])
	assert.NotEmpty(t, last["reason"])
}

// jsonRecords parses every line of stderr as a JSON log record.
func jsonRecords(t *testing.T, stderr string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &rec), "not a JSON log line: %q", l)
		recs = append(recs, rec)
	}
	return recs
}
