package importer_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/importer"
	"github.com/diskimport/engine/internal/testimg"
)

// bodyCounter counts the response body bytes a handler writes.
type bodyCounter struct {
	h    http.Handler
	sent atomic.Int64
}

func (c *bodyCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.h.ServeHTTP(countingWriter{w, &c.sent}, r)
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n.Add(int64(n))
	return n, err
}

// On the ranged route BytesRead counts the range reads too, not only the
// head of the first response.
func TestRangedBytesReadCountsRangeReads(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", imageSize, 31)
	www := filepath.Join(dir, "www")
	require.NoError(t, os.Mkdir(www, 0o755))
	qcow := testimg.Convert(t, raw, filepath.Join(www, "disk.qcow2"), "qcow2")
	st, err := os.Stat(qcow)
	require.NoError(t, err)
	bc := &bodyCounter{h: http.FileServer(http.Dir(www))}
	srv := httptest.NewServer(bc)
	t.Cleanup(srv.Close)

	var last importer.Progress
	res, err := importer.Import(context.Background(), importer.Options{
		Source: srv.URL + "/disk.qcow2", Target: filepath.Join(t.TempDir(), "disk.img"),
		Logger: testLogger(t), Progress: func(p importer.Progress) { last = p },
	})
	require.NoError(t, err)
	require.False(t, res.ScratchUsed, "phases %v", res.Phases)
	// qemu-img reads every allocated cluster: most of the file came over
	// the wire, and no more than the server sent.
	assert.Greater(t, res.BytesRead, st.Size()/2, "file %d bytes", st.Size())
	assert.LessOrEqual(t, res.BytesRead, bc.sent.Load())
	assert.Equal(t, res.BytesRead, last.BytesRead, "the last progress report agrees")
}

// A failed import reports the virtual size it found.
func TestTooSmallReportsVirtualSize(t *testing.T) {
	testimg.Need(t, "qemu-img")
	dir := t.TempDir()
	raw := testimg.Raw(t, dir, "disk.raw", 3<<20, 32)
	qcow := testimg.Convert(t, raw, filepath.Join(dir, "disk.qcow2"), "qcow2")
	for name, src := range map[string]string{"raw": raw, "qcow2": qcow} {
		t.Run(name, func(t *testing.T) {
			res, err := importer.Import(context.Background(), importer.Options{
				Source: src, Target: filepath.Join(t.TempDir(), "disk.img"), TargetOptions: importer.TargetOptions{
					Size: 2 << 20,
				}, Logger: testLogger(t),
			})
			require.ErrorIs(t, err, importer.ErrTargetTooSmall)
			assert.EqualValues(t, 3<<20, res.VirtualSize)
			var se *importer.SizeError
			require.True(t, errors.As(err, &se))
		})
	}
}
