package uploadserver_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testkit/bubblenet"
	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/uploadserver"
)

// stalledUpload starts an upload of path that sends its first `sent` bytes
// and then stops sending while keeping the connection open. The client is
// released at cleanup.
func stalledUpload(t *testing.T, url, path string, sent int) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, pr)
	require.NoError(t, err)
	req.ContentLength = int64(len(data)) // the server expects more than it gets
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	go func() { _, _ = pw.Write(data[:sent]) }()
	t.Cleanup(func() {
		cancel()
		pw.CloseWithError(io.ErrClosedPipe)
		<-done
	})
}

func TestUploadStalledClientReleasesTheSlot(t *testing.T) {
	for _, mode := range []struct{ name, path string }{
		{"sync", uploadserver.PathUpload},
		{"async", uploadserver.PathUploadAsync},
	} {
		t.Run(mode.name, func(t *testing.T) {
			im := makeImages(t)
			o := fileTarget(t)
			o.StallTimeout = 300 * time.Millisecond
			h, base := serve(t, uploadserver.Options{Import: o})

			stalledUpload(t, base+mode.path, im.raw, 1<<20+123)
			waitStatus(t, h, func(s uploadserver.Status) bool { return s.Busy && s.Bytes > 0 })
			start := time.Now()
			st := waitStatus(t, h, func(s uploadserver.Status) bool { return !s.Busy })
			t.Logf("slot released %s after the stall began", time.Since(start))
			assert.Equal(t, "Error", st.Phase)
			assert.Contains(t, st.Error, "no data received from the upload client for 300ms")
			_, err, ok := h.Last()
			assert.False(t, ok)
			assert.ErrorContains(t, err, "no data received from the upload client")
			_, statErr := os.Stat(o.Target)
			assert.True(t, os.IsNotExist(statErr), "a stalled upload leaves no image")

			// The next upload is accepted and lands whole.
			code, body := post(t, base+uploadserver.PathUpload, im.raw, "", false)
			require.Equal(t, http.StatusOK, code, body)
			assert.Equal(t, im.digest, testimg.Digest(t, o.Target, diskSize))
		})
	}
}

// TestUploadSlowClientIsNotAStall: a client that keeps sending, however
// slowly, is never cut off, even when the whole upload takes far longer
// than the stall timeout. Client, server and import run in a synctest
// bubble over an in-memory network: every gap is exactly 100 ms of the
// bubble's clock, which also drives the stall timer, so a loaded machine
// cannot stretch a gap past 300 ms (on loopback it could).
func TestUploadSlowClientIsNotAStall(t *testing.T) {
	im := makeImages(t)
	synctest.Test(t, func(t *testing.T) {
		data := im.data
		o := fileTarget(t)
		o.StallTimeout = 300 * time.Millisecond
		o.Logger = testimg.Logger(t)
		h := uploadserver.NewHandler(uploadserver.Options{Import: o, Logger: o.Logger})
		t.Cleanup(h.Wait)
		client := &http.Client{Transport: bubblenet.HTTP(t, h)}
		pr, pw := io.Pipe()
		written := make(chan struct{})
		go func() {
			defer close(written)
			// 4 MiB in 16 steps of 100 ms: 1.6 s in all, each gap under 300 ms.
			for off := 0; off < len(data); off += len(data) / 16 {
				if _, err := pw.Write(data[off:min(off+len(data)/16, len(data))]); err != nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			pw.Close()
		}()
		defer func() {
			pw.CloseWithError(io.ErrClosedPipe)
			<-written
		}()
		req, err := http.NewRequest(http.MethodPost, bubblenet.URL+uploadserver.PathUpload, pr)
		require.NoError(t, err)
		req.ContentLength = int64(len(data))
		start := time.Now()
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		assert.True(t, bytes.Contains(b, []byte("Upload Complete")), string(b))
		assert.GreaterOrEqual(t, time.Since(start), 1500*time.Millisecond, "the upload took the client's pace")
		assert.Equal(t, im.digest, testimg.Digest(t, o.Target, diskSize))
	})
}
