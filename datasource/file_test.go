package datasource_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testkit/testimg"
)

func TestFileRegular(t *testing.T) {
	data := testImage(t, 1<<20+123)
	p := writeTemp(t, data)
	src := datasource.NewFile(p)
	assert.Equal(t, p, src.String())
	for range 2 { // a file can be reopened
		st, got, err := readAll(t, src)
		require.NoError(t, err)
		assert.Equal(t, sum(data), sum(got))
		assert.Equal(t, int64(len(data)), st.Size)
		assert.Equal(t, p, st.LocalPath)
	}
}

func TestFileRelativePathGivesAbsoluteLocalPath(t *testing.T) {
	data := testImage(t, 8192)
	p := writeTemp(t, data)
	t.Chdir(filepath.Dir(p))
	st, got, err := readAll(t, datasource.NewFile(filepath.Base(p)))
	require.NoError(t, err)
	assert.Equal(t, data, got)
	assert.Equal(t, p, st.LocalPath)
}

func TestFileMissing(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nope.qcow2")
	_, err := datasource.NewFile(p).Open(context.Background())
	require.Error(t, err)
	assert.ErrorIs(t, err, errdefs.ErrSourceUnreachable)
	assert.Contains(t, err.Error(), p)
}

func TestFileDirectoryRefused(t *testing.T) {
	_, err := datasource.NewFile(t.TempDir()).Open(context.Background())
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)
}

func TestFileFIFOStreamsWithoutSize(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, exec.Command("mkfifo", p).Run())
	data := testImage(t, 64<<10)
	go func() {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		f.Write(data)
		f.Close()
	}()
	st, got, err := readAll(t, datasource.NewFile(p))
	require.NoError(t, err)
	assert.Equal(t, sum(data), sum(got))
	assert.Equal(t, int64(-1), st.Size)
	assert.Empty(t, st.LocalPath)
}

func TestFileContextCancel(t *testing.T) {
	p := writeTemp(t, testImage(t, 1<<20))
	ctx, cancel := context.WithCancel(context.Background())
	st, err := datasource.NewFile(p).Open(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { st.Body.Close() })
	buf := make([]byte, 4096)
	_, err = st.Body.Read(buf)
	require.NoError(t, err)
	cancel()
	_, err = st.Body.Read(buf)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, errdefs.ErrCancelled)
}

func TestFileBlockDevice(t *testing.T) {
	data := testImage(t, 2<<20)
	p := writeTemp(t, data)
	dev := testimg.AttachLoop(t, p, "--read-only")
	st, got, err := readAll(t, datasource.NewFile(dev))
	require.NoError(t, err)
	assert.Equal(t, int64(len(data)), st.Size)
	assert.Equal(t, dev, st.LocalPath)
	assert.Equal(t, sum(data), sum(got))
}

func TestReaderOnce(t *testing.T) {
	data := testImage(t, 300<<10)
	src := datasource.NewReader("stdin", bytes.NewReader(data))
	assert.Equal(t, "stdin", src.String())
	st, got, err := readAll(t, src)
	require.NoError(t, err)
	assert.Equal(t, sum(data), sum(got))
	assert.Equal(t, int64(-1), st.Size)
	assert.Empty(t, st.LocalPath)
	_, err = src.Open(context.Background())
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)
}

func TestReaderContextCancel(t *testing.T) {
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	st, err := datasource.NewReader("upload", pr).Open(ctx)
	require.NoError(t, err)
	cancel()
	_, err = st.Body.Read(make([]byte, 10))
	assert.ErrorIs(t, err, context.Canceled)
}

func TestNewDispatch(t *testing.T) {
	src, err := datasource.New("-", datasource.Config{})
	require.NoError(t, err)
	assert.Equal(t, "standard input", src.String())

	src, err = datasource.New("https://example.com/a.qcow2", datasource.Config{})
	require.NoError(t, err)
	assert.Equal(t, "https://example.com/a.qcow2", src.String())

	data := testImage(t, 4096)
	p := writeTemp(t, data)
	for _, ep := range []string{p, "file://" + p} {
		src, err = datasource.New(ep, datasource.Config{})
		require.NoError(t, err)
		st, got, err := readAll(t, src)
		require.NoError(t, err, ep)
		assert.Equal(t, data, got)
		assert.Equal(t, p, st.LocalPath)
	}

	for _, ep := range []string{"s3://bucket/key", "gs://b/o"} {
		src, err = datasource.New(ep, datasource.Config{})
		require.NoError(t, err, ep) // registered object-store sources
		assert.Contains(t, src.String(), strings.SplitN(ep, "://", 2)[1], ep)
	}
	_, err = datasource.New("", datasource.Config{})
	assert.ErrorIs(t, err, errdefs.ErrInvalidOptions)
	_, err = datasource.New("http://example.com/x", datasource.Config{Access: datasource.Access{Headers: []string{"broken"}}})
	assert.True(t, errors.Is(err, errdefs.ErrInvalidOptions))
}
