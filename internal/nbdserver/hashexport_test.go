package nbdserver

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/blkhash"
)

// Writes and zeroings in any order, the last one over a range winning,
// give the digest of the disk the export holds after them.
func TestHashingExportDigestsWhatWasWritten(t *testing.T) {
	const size = 3 << 20
	mem := &memExport{data: make([]byte, size)}
	h := NewHashingExport(mem)
	data := testData(size)
	// Back to front in 1 MiB pieces, then a range zeroed over the data.
	for off := int64(size - 1<<20); off >= 0; off -= 1 << 20 {
		_, err := h.WriteAt(data[off:off+1<<20], off)
		require.NoError(t, err)
	}
	require.NoError(t, h.ZeroAt(1<<20, 256<<10, true, false))
	got, err := h.Sum(size)
	require.NoError(t, err)
	want := blkhash.New(0)
	_, _ = want.Write(mem.data)
	assert.Equal(t, want.Sum(), got)
	assert.Equal(t, make([]byte, 256<<10), mem.data[1<<20:1<<20+256<<10], "the zeroing reached the export")
}
