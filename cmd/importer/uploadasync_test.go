package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/cmd/importer/internal/cdi"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/uploadserver"
)

// TestUploadAsyncToOurServerWaitsForComplete: `importer upload --async`
// against `importer upload-server` on 127.0.0.1 exits 0 only once the
// server's status said Complete, with the target equal to the source, and
// the server exits 0 right after that status was read. Before, the server
// stopped as soon as the import ended and the client, its status request
// refused, exited 0 saying the result was not seen (checked).
func TestUploadAsyncToOurServerWaitsForComplete(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw, qcow2 := testimg.RawAndQCOW2(t, dir, 32<<20, 45)
	dest := filepath.Join(t.TempDir(), "disk.img")
	addr := freeAddr(t)
	done := runAsync(t, env(nil), "upload-server", "--listen", addr, dest)
	waitHealthy(t, http.DefaultClient, "http://"+addr)

	code, stdout, stderr := runCLI(t, nil, env(nil), "upload", "--async", "--json", qcow2, "http://"+addr)
	require.Equal(t, cdi.ExitOK, code, stderr)
	assert.Contains(t, stderr, "the server's status says Complete")
	var st uploadserver.Status
	require.NoError(t, json.Unmarshal([]byte(stdout), &st), stdout)
	assert.True(t, st.Complete)
	assert.Equal(t, "Complete", st.Phase)
	assert.Equal(t, cdi.ExitOK, waitExit(t, done), "the server exits once its result was read")
	assert.Equal(t, testimg.Digest(t, raw, -1), testimg.Digest(t, dest, -1))
}

// TestUploadAsyncToOurServerReportsItsFailure: an asynchronous upload whose
// import fails after every byte was received and validated (a qcow2 whose
// compressed clusters are damaged, which qemu-img check passes and
// qemu-img convert cannot read, onto a qcow2 DEST: scratch, then convert)
// exits 1 with the server's cause, and DEST is not there; the server stays
// up for another upload.
func TestUploadAsyncToOurServerReportsItsFailure(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := filepath.Join(dir, "text.raw")
	var text []byte
	for i := 0; len(text) < 4<<20; i++ {
		text = fmt.Appendf(text, "line %d of a disk that compresses well\n", i)
	}
	require.NoError(t, os.WriteFile(raw, text[:4<<20], 0o644))
	img := filepath.Join(dir, "damaged.qcow2")
	testimg.Run(t, "qemu-img", "convert", "-q", "-c", "-O", "qcow2", raw, img)
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	require.NoError(t, err)
	fi, err := f.Stat()
	require.NoError(t, err)
	// The compressed clusters follow the header, refcounts, L1 and L2 (the
	// first 320 KiB of 530 KiB).
	_, err = f.WriteAt(bytes.Repeat([]byte{0xff}, 4<<10), fi.Size()*3/4)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	dest := filepath.Join(t.TempDir(), "disk.qcow2")
	addr := freeAddr(t)
	runAsync(t, env(nil), "upload-server", "--listen", addr, "--format", "qcow2", dest)
	waitHealthy(t, http.DefaultClient, "http://"+addr)

	code, _, stderr := runCLI(t, nil, env(nil), "upload", "--async", img, "http://"+addr)
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "importer: upload failed: the server received the upload and its import failed: converting qcow2 image to qcow2: the image's data could not be decoded")
	assert.NotContains(t, stderr, "Upload complete")
	assert.NoFileExists(t, dest)
}

// TestUploadAsyncStatusUnreadableIsNoSuccess: a server that answers the
// asynchronous upload, shows the import busy once, then stops answering:
// the client fails, saying the result is unknown (it exited 0 before,
// checked).
func TestUploadAsyncStatusUnreadableIsNoSuccess(t *testing.T) {
	raw := testimg.Raw(t, t.TempDir(), "disk.raw", 64<<10, 47)
	var polls atomic.Int32
	srv := hangingServer(t, func(w http.ResponseWriter, r *http.Request, _ <-chan struct{}) {
		switch {
		case r.Method == http.MethodPost:
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = w.Write([]byte("upload received\n"))
		case r.URL.Path == uploadserver.PathStatus:
			if polls.Add(1) > 1 {
				panic(http.ErrAbortHandler) // the connection dropped, no answer
			}
			_ = json.NewEncoder(w).Encode(uploadserver.Status{Phase: "Convert", Busy: true})
		}
	})
	code, stderr := runBounded(t, 20*time.Second, "upload", "--async", "--status-interval", "50ms", raw, srv.URL)
	assert.Equal(t, cdi.ExitFailed, code)
	assert.Contains(t, stderr, "the server received the upload, then its status at "+srv.URL+uploadserver.PathStatus+" could not be read (last status: phase Convert), so the import's result is unknown")
	assert.NotContains(t, stderr, "Upload complete")
}
