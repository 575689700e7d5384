package uploadserver_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/testkit/testimg"
	"github.com/diskimport/engine/uploadserver"
)

// TestAsyncResultIsReadBeforeDone: with ResultGrace, a successful
// asynchronous import leaves Done open until a status request was
// answered Complete (then it closes), or until the grace ends with no
// such request; a synchronous import, whose answer is its result, and a
// server without ResultGrace (CDI's) close it at once; KeepRunning never.
func TestAsyncResultIsReadBeforeDone(t *testing.T) {
	raw := testimg.Raw(t, t.TempDir(), "disk.raw", 1<<20, 12)
	closed := func(h *uploadserver.Handler) bool {
		select {
		case <-h.Done():
			return true
		default:
			return false
		}
	}
	upload := func(t *testing.T, grace time.Duration, path string, keepRunning ...bool) (*uploadserver.Handler, string) {
		h, base := serve(t, uploadserver.Options{Import: fileTarget(t), ResultGrace: grace, KeepRunning: len(keepRunning) > 0})
		code, body := post(t, base+path, raw, "", false)
		require.Equal(t, http.StatusOK, code, body)
		waitStatus(t, h, func(s uploadserver.Status) bool { return s.Complete })
		return h, base
	}

	h, base := upload(t, time.Hour, uploadserver.PathUploadAsync)
	assert.False(t, closed(h), "Done before the result was read")
	assert.True(t, getStatus(t, base, "").Complete)
	assert.True(t, closed(h), "Done once the status said Complete")

	waitDone := func(h *uploadserver.Handler, why string) {
		select {
		case <-h.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("Done never closed: " + why)
		}
	}
	h, _ = upload(t, 50*time.Millisecond, uploadserver.PathUploadAsync)
	waitDone(h, "after the grace, with no status read")

	h, _ = upload(t, time.Hour, uploadserver.PathUpload)
	assert.True(t, closed(h), "a synchronous import's answer is its result")
	h, _ = upload(t, 0, uploadserver.PathUploadAsync)
	waitDone(h, "no grace")

	h, base = upload(t, time.Hour, uploadserver.PathUploadAsync, true)
	assert.True(t, getStatus(t, base, "").Complete)
	assert.False(t, closed(h), "KeepRunning: never Done")
}
