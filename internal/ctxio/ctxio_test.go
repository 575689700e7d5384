package ctxio_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/ctxio"
)

func TestReaderStopsOnceContextEnds(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, []byte("0123456789"), 0o644))
	f, err := os.Open(p)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := ctxio.NewReadCloser(ctx, "reading f", f, f.Close)
	buf := make([]byte, 4)
	n, err := r.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "0123", string(buf[:n]))
	cancel()
	_, err = r.Read(buf)
	require.ErrorIs(t, err, errdefs.ErrCancelled)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, "reading f cancelled", err.Error())
	require.NoError(t, r.Close())
	_, err = f.Read(buf)
	assert.True(t, errors.Is(err, os.ErrClosed), "Close closes the file")
}

func TestReaderWithoutClose(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := ctxio.NewReader(ctx, "", strings.NewReader("abc"))
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, "abc", string(got))
	assert.NoError(t, r.Close())
	cancel()
	_, err = r.Read(make([]byte, 1))
	assert.Equal(t, "cancelled", err.Error())
	assert.ErrorIs(t, err, errdefs.ErrCancelled)
	assert.ErrorIs(t, err, context.Canceled)
}
