package nbdserver

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/internal/blkhash"
)

// Writes and zeroings out of order, as qemu-img's concurrent requests
// come, give the digest of the disk the export holds after them; a fast
// zero the export refuses is not hashed (qemu-img writes the zeros then).
func TestHashingExportDigestsWhatWasWritten(t *testing.T) {
	const size = 3 << 20
	data := testData(size)
	// The export starts with old data everywhere: the zeroing must reach it.
	mem := &memExport{data: bytes.Clone(data), noFast: true}
	h := NewHashingExport(mem)
	_, err := h.WriteAt(data[2<<20:], 2<<20)
	require.NoError(t, err)
	require.Error(t, h.ZeroAt(1<<20, 1<<20, true, true), "a fast zero refused")
	require.NoError(t, h.ZeroAt(1<<20, 1<<20, true, false))
	_, err = h.WriteAt(data[:1<<20], 0)
	require.NoError(t, err)
	got, err := h.Sum(size)
	require.NoError(t, err)
	disk := bytes.Clone(data)
	clear(disk[1<<20 : 2<<20])
	assert.Equal(t, disk, mem.data, "the zeroing reached the export")
	want := blkhash.New(0)
	_, _ = want.Write(disk)
	assert.Equal(t, want.Sum(), got)
}
