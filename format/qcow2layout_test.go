package format

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
)

// qcow2FileHeader parses the header of the qcow2 at path.
func qcow2FileHeader(t *testing.T, path string) Header {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	h, err := ParseHeader(QCOW2, b[:min(len(b), 64<<10)])
	require.NoError(t, err)
	return h
}

// readLayout reads the layout of the qcow2 at path, cut to size bytes.
func readLayout(t *testing.T, path string, size, maxTableBytes int64) (QCOW2Layout, error) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	return ReadQCOW2Layout(context.Background(), f, qcow2FileHeader(t, path), size, maxTableBytes)
}

// A plain qcow2 qemu-img wrote references about its whole file, none of
// it before its tables; tables past the bound are not read; tables
// outside the file are refused, not read past the end.
func TestReadQCOW2Layout(t *testing.T) {
	needTool(t, "qemu-img")
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	writeRaw(t, raw, variedContent(24<<20, 4))
	plain := filepath.Join(dir, "plain.qcow2")
	run(t, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, plain)
	st, err := os.Stat(plain)
	require.NoError(t, err)
	lay, err := readLayout(t, plain, st.Size(), 16<<20)
	require.NoError(t, err)
	assert.InDelta(t, st.Size(), lay.Referenced, float64(st.Size())/10, "layout %+v", lay)
	assert.Zero(t, lay.Early)
	assert.Zero(t, lay.Compressed)
	assert.Equal(t, 1, lay.L2Tables)
	assert.Positive(t, lay.Clusters)

	_, err = readLayout(t, plain, st.Size(), 4<<10)
	assert.ErrorIs(t, err, errdefs.ErrTablesTooLarge, "one 64 KiB L2 table past a 4 KiB bound")

	// Growing the disk moves the L1 table to the end of the file; cut
	// just past its start.
	moved := filepath.Join(dir, "moved.qcow2")
	run(t, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, moved)
	run(t, "qemu-img", "resize", "-q", "-f", "qcow2", moved, "2G")
	h := qcow2FileHeader(t, moved)
	require.NoError(t, os.Truncate(moved, int64(h.L1TableOffset)+4))
	_, err = readLayout(t, moved, int64(h.L1TableOffset)+4, 16<<20)
	require.Error(t, err)
	assert.ErrorIs(t, err, errdefs.ErrInvalidImage)
}
