package importer_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/importer"
)

// A library import that times out while it retries a refused connection
// (NoConnectRetry off, the default) keeps the cause in its chain and its
// text: a controller sees "connection refused", not only the deadline.
func TestImportTimedOutKeepsTheCause(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + l.Addr().String() + "/disk.qcow2"
	require.NoError(t, l.Close())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = importer.Import(ctx, importer.Options{Source: url, Target: filepath.Join(t.TempDir(), "disk.img"),
		Access: datasource.Access{
			RetryBackoff: 50 * time.Millisecond,
		}, Logger: testLogger(t)})
	t.Log(err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, importer.ErrCancelled)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED, "the cause stays in the chain")
	assert.ErrorIs(t, err, importer.ErrSourceUnreachable)
	assert.Contains(t, err.Error(), "timed out while retrying after: GET "+url+": dial tcp")
	assert.Contains(t, err.Error(), "connection refused")
}

// A cancelled import reads "import cancelled", whatever was cut short
// (which stays in the chain).
func TestImportCancelledReadsCancelled(t *testing.T) {
	// 16 MiB at 64 KiB every 50 ms: the transfer would take 12 s.
	data := bytes.Repeat([]byte{7}, 16<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		for off := 0; off < len(data); off += 64 << 10 {
			if _, err := w.Write(data[off : off+64<<10]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(srv.Close)
	srvURL := srv.URL + "/disk.img"
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	_, err := importer.Import(ctx, importer.Options{Source: srvURL, Target: filepath.Join(t.TempDir(), "disk.img"), Logger: testLogger(t)})
	require.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, importer.ErrCancelled)
	assert.Equal(t, "import cancelled", err.Error())
}

// With no Logger the library logs nothing: not to slog's default logger
// (the caller's program's own log) either.
func TestImportWithoutLoggerLogsNothing(t *testing.T) {
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	dir := t.TempDir()
	src := filepath.Join(dir, "disk.raw")
	disk := bytes.Repeat([]byte{0xeb, 0x3c, 0x90}, 1<<20)
	disk[510], disk[511] = 0x55, 0xaa
	require.NoError(t, os.WriteFile(src, disk, 0o644))
	res, err := importer.Import(context.Background(), importer.Options{Source: src, Target: filepath.Join(dir, "disk.img")})
	require.NoError(t, err)
	assert.True(t, res.Complete)
	got, err := os.ReadFile(filepath.Join(dir, "disk.img"))
	require.NoError(t, err)
	assert.Equal(t, disk, got)
	_, err = importer.Import(context.Background(), importer.Options{Source: filepath.Join(dir, "nope"), Target: filepath.Join(dir, "x.img")})
	require.Error(t, err)
	assert.Empty(t, logs.String())
}
