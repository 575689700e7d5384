package format

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// inputRingForTest is an input ring of two 64 KiB slots whose child's
// ends this test plays: the ring's file and the pipe of slots handed back,
// as the child holds them, and the records the feeder writes.
func inputRingForTest(t *testing.T) (r *inputRing, records io.Reader, mem, back *os.File) {
	t.Helper()
	recR, recW, err := os.Pipe()
	require.NoError(t, err)
	r, extra, err := newInputRing(64<<10, 2, recW)
	require.NoError(t, err)
	t.Cleanup(func() {
		r.close()
		r.back.Close()
		recR.Close()
		for _, f := range extra {
			f.Close()
		}
	})
	return r, recR, extra[0], extra[1]
}

// The feeder reads the source into a slot and names the bytes in a
// record; the child sees them in its mapping of the ring.
func TestInputRingNamesTheBytesItRead(t *testing.T) {
	r, records, mem, _ := inputRingForTest(t)
	want := variedContent(100, 52)
	slot, ok := r.take()
	require.True(t, ok)
	require.False(t, r.fill(bytes.NewReader(want), slot), "the source ended")
	rec := make([]byte, inRecordSize)
	_, err := io.ReadFull(records, rec)
	require.NoError(t, err)
	require.EqualValues(t, slot, binary.NativeEndian.Uint32(rec))
	require.EqualValues(t, len(want), binary.NativeEndian.Uint32(rec[4:]))
	child, err := unix.Mmap(int(mem.Fd()), 0, 2*64<<10, unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(child)
	assert.Equal(t, want, child[slot*64<<10:slot*64<<10+len(want)])
}

// A child taken over by a hostile stream cannot change the bytes the
// feeder hashed on their way in: its ring is sealed against every writer
// but the feeder's own mapping. A slot it hands back that is not one
// stops the feeder.
func TestInputRingIsReadOnlyForTheChild(t *testing.T) {
	r, _, mem, back := inputRingForTest(t)
	fd := int(mem.Fd())
	_, err := unix.Mmap(fd, 0, 64<<10, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	assert.ErrorIs(t, err, unix.EPERM, "a writable shared mapping")
	ro, err := unix.Mmap(fd, 0, 64<<10, unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(ro)
	assert.Error(t, unix.Mprotect(ro, unix.PROT_READ|unix.PROT_WRITE), "making a read-only mapping writable")
	_, err = unix.Pwrite(fd, []byte{1}, 0)
	assert.ErrorIs(t, err, unix.EPERM, "write(2)")
	assert.ErrorIs(t, unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 4096), unix.EPERM, "punching a hole")
	assert.ErrorIs(t, unix.Ftruncate(fd, 4096), unix.EPERM, "shrinking")

	for range 2 { // the slots never handed out
		_, ok := r.take()
		require.True(t, ok)
	}
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], 2)
	_, err = back.Write(b[:])
	require.NoError(t, err)
	_, ok := r.take()
	assert.False(t, ok, "slot 2 of a ring of 2")
}
