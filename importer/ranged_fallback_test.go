package importer_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testimg"
)

// rangeIgnoringServer advertises "Accept-Ranges: bytes" but answers every
// request, ranged or not, with 200 and the whole file, as some proxies and
// object stores do.
func rangeIgnoringServer(t *testing.T, path string, ranged *atomic.Int64) *httptest.Server {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" {
			ranged.Add(1)
		}
		w.Header().Set("Accept-Ranges", "bytes")
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(data)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestRangedFallsBackWhenServerIgnoresRanges(t *testing.T) {
	testimg.Need(t, "qemu-img")
	tmp := privateTmp(t)
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 31)
	qcow := testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2")
	var ranged atomic.Int64
	srv := rangeIgnoringServer(t, qcow, &ranged)

	var logs bytes.Buffer
	o := importer.Options{
		Source: srv.URL + "/disk.qcow2", Target: filepath.Join(t.TempDir(), "disk.img"),
		TargetOptions: importer.TargetOptions{
			ScratchDir: t.TempDir(),
		},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	res, err := importer.Import(context.Background(), o)
	t.Log(logs.String())
	require.NoError(t, err)
	assert.Equal(t, "qcow2", res.SourceFormat)
	// The stream that follows is decoded straight onto the target.
	assert.False(t, res.ScratchUsed, "phases %v", res.Phases)
	assert.Contains(t, res.Phases, importer.PhaseTransferDataFile)
	assert.NotContains(t, res.Phases, importer.PhaseConvert)
	assert.Greater(t, ranged.Load(), int64(0), "the engine did try a range")
	assert.Contains(t, logs.String(), "range read failed; reading the image as a stream instead")
	assert.Contains(t, logs.String(), "instead of 206 Partial Content", "the log says why")
	expectImage(t, raw, o.Target, false)
	assertEmptyDir(t, o.ScratchDir)
	assertNoSocketDir(t, tmp)
}
