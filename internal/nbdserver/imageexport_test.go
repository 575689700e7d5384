package nbdserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/iostage"
)

// memImage is an ImageReader over bytes in memory that records its Close.
type memImage struct {
	r      *bytes.Reader
	closed atomic.Bool
}

func (m *memImage) ReadAt(p []byte, off int64) (int, error) { return m.r.ReadAt(p, off) }
func (m *memImage) Size() int64                             { return m.r.Size() }
func (m *memImage) Close() error {
	m.closed.Store(true)
	return nil
}

// serveMemImage serves data through ServeImage and stops it when the test
// ends.
func serveMemImage(t *testing.T, data []byte, o ImageExportOptions) (*ImageExport, *memImage) {
	t.Helper()
	img := &memImage{r: bytes.NewReader(data)}
	e, err := ServeImage(context.Background(), func(context.Context) (ImageReader, error) { return img, nil }, o)
	require.NoError(t, err)
	t.Cleanup(func() { e.Stop(slog.New(slog.DiscardHandler)) })
	return e, img
}

// qemu-img converts the image it is served, byte for byte, with read-ahead
// windows and without; every byte it read crossed the counted reader;
// Stop closes the reader and removes the socket directory.
func TestImageExportServesTheImageToQemuImg(t *testing.T) {
	needQemu(t)
	data := testData(3<<20 + 512)
	src := qcow2Of(t, data)
	file, err := os.ReadFile(src)
	require.NoError(t, err)
	for _, noReadAhead := range []bool{false, true} {
		wire := &iostage.RangeCounter{}
		e, img := serveMemImage(t, file, ImageExportOptions{Wire: wire, NoReadAhead: noReadAhead})
		assert.Equal(t, int64(len(file)), e.Size())
		dst := filepath.Join(t.TempDir(), "out.raw")
		out, err := qemuImg(t, "convert", "-f", "qcow2", "-O", "raw", e.QemuSpec(), dst)
		require.NoError(t, err, "%s", out)
		got, err := os.ReadFile(dst)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(data, got), "noReadAhead %v: the converted image differs", noReadAhead)
		assert.NoError(t, e.Err())
		assert.Greater(t, wire.Distinct(0), int64(0), "noReadAhead %v: reads were not counted", noReadAhead)
		head := make([]byte, 4)
		_, err = e.ReaderAt().ReadAt(head, 0)
		require.NoError(t, err)
		assert.Equal(t, []byte("QFI\xfb"), head)

		dir := filepath.Dir(e.unix.SocketPath())
		e.Stop(slog.New(slog.DiscardHandler))
		assert.True(t, img.closed.Load(), "Stop left the reader open")
		_, err = os.Stat(dir)
		assert.ErrorIs(t, err, os.ErrNotExist)
	}
}

// The spec keeps qemu-img from opening any backing file; qemu-img's names
// for the export are its socket's two URI forms.
func TestImageExportSpecAndNames(t *testing.T) {
	e, _ := serveMemImage(t, nil, ImageExportOptions{})
	sock := e.unix.SocketPath()
	assert.Equal(t, `json:{"backing":null,"file":{"driver":"nbd","server":{"path":"`+sock+`","type":"unix"}}}`, e.QemuSpec())
	assert.Equal(t, []string{"nbd+unix://?socket=" + sock, "nbd+unix:///?socket=" + sock}, e.QemuNames())
}

// A read the image fails is the export's Err and named by Cause; a reader
// that cannot be opened fails ServeImage and leaves no socket directory;
// Stop, Err and Cause are safe on nil.
func TestImageExportReportsReadAndOpenFailures(t *testing.T) {
	needQemu(t)
	data := testData(4 << 20)
	img := &failingImage{memImage: memImage{r: bytes.NewReader(data)}, bad: 3 << 20}
	e, err := ServeImage(context.Background(), func(context.Context) (ImageReader, error) { return img, nil }, ImageExportOptions{NoReadAhead: true})
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)
	t.Cleanup(func() { e.Stop(log) })
	out, err := qemuImg(t, "convert", "-f", "raw", "-O", "raw", e.QemuSpec(), filepath.Join(t.TempDir(), "out.raw"))
	require.Error(t, err, "%s", out)
	assert.ErrorIs(t, e.Err(), errBackend)
	assert.ErrorIs(t, e.Cause(err), errBackend)
	assert.Contains(t, e.Cause(err).Error(), "reading the image over HTTP failed")

	// A temporary directory of its own (short: a socket path must fit
	// in 108 bytes), so other tests' exports do not count.
	tmp, err := os.MkdirTemp("", "nbdt")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(tmp) })
	t.Setenv("TMPDIR", tmp)
	errOpen := errors.New("the object is gone")
	_, err = ServeImage(context.Background(), func(context.Context) (ImageReader, error) { return nil, errOpen }, ImageExportOptions{})
	assert.ErrorIs(t, err, errOpen)
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, left, "a failed start left its socket directory")

	var none *ImageExport
	none.Stop(log)
	assert.NoError(t, none.Err())
	assert.Equal(t, errOpen, none.Cause(errOpen))
}

// failingImage fails reads touching byte bad.
type failingImage struct {
	memImage
	bad int64
}

func (f *failingImage) ReadAt(p []byte, off int64) (int, error) {
	return failAt{r: f.memImage.r, bad: f.bad}.ReadAt(p, off)
}

// cancelledImage fails its reads from bad on as a range reader does once
// its import was stopped (Ctrl-C): with an error matching ErrCancelled.
type cancelledImage struct {
	memImage
	bad int64
}

func (c *cancelledImage) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > c.bad {
		return 0, fmt.Errorf("reading http://example/disk: %w", errdefs.ErrCancelled)
	}
	return c.memImage.ReadAt(p, off)
}

// TestImageExportWarnsOfFailedReadsNotOfStoppedOnes: a read the image
// fails is a warning; a read stopped because the import was cancelled is
// not (on Ctrl-C one "NBD export read failed" per read in flight was drawn
// over the progress bar): the import says it was cancelled, once.
func TestImageExportWarnsOfFailedReadsNotOfStoppedOnes(t *testing.T) {
	needQemu(t)
	data := testData(4 << 20)
	for _, c := range []struct {
		name string
		img  ImageReader
		warn bool
	}{
		{"failed", &failingImage{memImage: memImage{r: bytes.NewReader(data)}, bad: 3 << 20}, true},
		{"cancelled", &cancelledImage{memImage: memImage{r: bytes.NewReader(data)}, bad: 3 << 20}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logged bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logged, nil))
			e, err := ServeImage(context.Background(), func(context.Context) (ImageReader, error) { return c.img, nil },
				ImageExportOptions{NoReadAhead: true, Logger: log})
			require.NoError(t, err)
			t.Cleanup(func() { e.Stop(slog.New(slog.DiscardHandler)) })
			out, err := qemuImg(t, "convert", "-f", "raw", "-O", "raw", e.QemuSpec(), filepath.Join(t.TempDir(), "out.raw"))
			require.Error(t, err, "%s", out)
			// Stopped first: a read still in flight may log after qemu-img
			// has exited, and the log is read only once nothing writes it.
			e.Stop(slog.New(slog.DiscardHandler))
			if c.warn {
				assert.Contains(t, logged.String(), "level=WARN msg=\"NBD export read failed\"")
			} else {
				assert.NotContains(t, logged.String(), "level=WARN")
			}
		})
	}
}
