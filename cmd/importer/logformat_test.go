package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/cdi"
	"github.com/diskimport/engine/internal/testimg"
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
	records := func(stderr string) []map[string]any {
		var recs []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
			var rec map[string]any
			require.NoError(t, json.Unmarshal([]byte(l), &rec), "not a JSON log line: %q", l)
			recs = append(recs, rec)
		}
		return recs
	}
	code, _, stderr := runCLI(t, nil, env(nil), "--log-format", "json", src, filepath.Join(dir, "out.img"))
	require.Equal(t, cdi.ExitOK, code)
	recs := records(stderr)
	last := recs[len(recs)-1]
	assert.Equal(t, "Import complete", last["msg"])
	assert.Equal(t, "raw", last["sourceFormat"])
	assert.EqualValues(t, 1<<20, last["virtualSize"])
	assert.EqualValues(t, 1<<20, last["bytesRead"])

	code, _, stderr = runCLI(t, nil, env(nil), "--log-format", "json", filepath.Join(dir, "nope.raw"), filepath.Join(dir, "x.img"))
	require.Equal(t, cdi.ExitFailed, code)
	recs = records(stderr)
	last = recs[len(recs)-1]
	assert.Equal(t, "ERROR", last["level"])
	assert.Equal(t, "import failed", last["msg"])
	assert.Equal(t, "source file "+filepath.Join(dir, "nope.raw")+" does not exist", last["error"])
	assert.Equal(t, "SourceUnreachable", last["reason"])
}
