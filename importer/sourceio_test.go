package importer

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/datasource"
)

// openDigitsFile opens a local file of "0123456789" as a transfer.
func openDigitsFile(t *testing.T) *datasource.Transfer {
	t.Helper()
	p := filepath.Join(t.TempDir(), "img")
	require.NoError(t, os.WriteFile(p, []byte("0123456789"), 0o644))
	st, err := datasource.NewFile(p).Open(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { st.Body.Close() })
	return st
}

func TestReadTail(t *testing.T) {
	st := openDigitsFile(t)
	tail, err := readTail(context.Background(), st, 4)
	require.NoError(t, err)
	assert.Equal(t, "6789", string(tail))
	tail, err = readTail(context.Background(), st, 11)
	require.NoError(t, err)
	assert.Nil(t, tail, "shorter than asked")

	stream, err := datasource.NewReader("upload", strings.NewReader("0123456789")).Open(context.Background())
	require.NoError(t, err)
	tail, err = readTail(context.Background(), stream, 4)
	require.NoError(t, err)
	assert.Nil(t, tail, "a plain stream's end cannot be read ahead")
}

func TestOpenAtRandomReadsAFileNotAStream(t *testing.T) {
	st := openDigitsFile(t)
	r, err := openAtRandom(context.Background(), st)
	require.NoError(t, err)
	require.NotNil(t, r)
	defer r.Close()
	assert.EqualValues(t, 10, r.Size())
	got := make([]byte, 3)
	_, err = r.ReadAt(got, 4)
	require.NoError(t, err)
	assert.Equal(t, "456", string(got))

	stream, err := datasource.NewReader("upload", strings.NewReader("0123456789")).Open(context.Background())
	require.NoError(t, err)
	r, err = openAtRandom(context.Background(), stream)
	require.NoError(t, err)
	assert.Nil(t, r, "a plain stream is read in order only")
}

func TestLocalAllocatedSizeSkipsHoles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sparse")
	f, err := os.Create(p)
	require.NoError(t, err)
	_, err = f.WriteAt(make([]byte, 4096), 0)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(64<<20))
	require.NoError(t, f.Close())
	n := localAllocatedSize(p)
	assert.Greater(t, n, int64(0))
	assert.Less(t, n, int64(1<<20), "a 64 MiB file of one written block costs its allocation")
	assert.Zero(t, localAllocatedSize(filepath.Join(t.TempDir(), "missing")))
}
