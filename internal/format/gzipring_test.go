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

// ringForTest is a ring of two 64 KiB slots whose child's ends this test
// plays: it returns the reader, the child's records pipe, the ring's file
// and the pipe of the slots handed back, as the child holds them.
func ringForTest(t *testing.T) (r *ringReader, records, mem, free *os.File) {
	t.Helper()
	return ringOfSlots(t, 64<<10, 2)
}

// ringOfSlots is ringForTest's ring with slots slots of slotBytes.
func ringOfSlots(t *testing.T, slotBytes, slots int) (r *ringReader, records, mem, free *os.File) {
	t.Helper()
	r, records, extra, err := newRingReader(slotBytes, slots)
	require.NoError(t, err)
	t.Cleanup(func() {
		r.Close()
		records.Close()
		for _, f := range extra {
			f.Close()
		}
	})
	return r, records, extra[0], extra[1]
}

func record(slot, n uint32) []byte { return recordWithZeros(slot, n, 0) }

func recordWithZeros(slot, n uint32, zeros uint64) []byte {
	b := make([]byte, ringRecordSize)
	binary.NativeEndian.PutUint32(b, slot)
	binary.NativeEndian.PutUint32(b[4:], n)
	binary.NativeEndian.PutUint64(b[8:], zeros)
	return b
}

// The granules a record names as zeros come out as runs (ReadRun) or as
// cleared bytes (Read), and are never read from the ring: what the child
// wrote there, even not zeros, is not what the importer takes. A bit for
// a granule the slot does not hold whole is not believed.
func TestRingReaderGivesTheGranulesNamedAsZerosAsRuns(t *testing.T) {
	const g = ringZeroGranule
	slot := variedContent(4*g, 54) // no zeros of its own
	n := 3*g + g/2                 // granule 3 held in half
	zeros := uint64(0b1110)        // granules 1, 2 and (not believed) 3
	want := bytes.Clone(slot[:n])
	clear(want[g : 3*g])
	for name, byRun := range map[string]bool{"ReadRun": true, "Read": false} {
		t.Run(name, func(t *testing.T) {
			r, records, mem, _ := ringOfSlots(t, 4*g, 2)
			_, err := mem.WriteAt(slot, 4*g) // slot 1
			require.NoError(t, err)
			_, err = records.Write(recordWithZeros(1, uint32(n), zeros))
			require.NoError(t, err)
			require.NoError(t, records.Close())
			r.zeroRuns = true // as the gzip mode's reader
			var got []byte
			var runs []int64
			buf := make([]byte, 3*g)
			for {
				var k int
				var z int64
				if byRun {
					k, z, err = r.ReadRun(buf)
				} else {
					k, err = r.Read(buf)
				}
				if z > 0 {
					runs = append(runs, z)
					got = append(got, make([]byte, z)...)
				}
				got = append(got, buf[:k]...)
				if err == io.EOF {
					break
				}
				require.NoError(t, err)
			}
			assert.True(t, bytes.Equal(want, got), "the slot's bytes, its granules of zeros cleared")
			if byRun {
				assert.Equal(t, []int64{2 * g}, runs, "granules 1 and 2 as one run")
			}
		})
	}
}

// The reader takes the bytes a record names out of the ring, and hands
// the slot back once they are read.
func TestRingReaderReadsTheSlotsTheChildFilled(t *testing.T) {
	r, records, mem, free := ringForTest(t)
	want := variedContent(100, 51)
	_, err := mem.WriteAt(want, 64<<10) // slot 1
	require.NoError(t, err)
	_, err = records.Write(record(1, 100))
	require.NoError(t, err)
	require.NoError(t, records.Close())
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	// The child's fd 4: slot 1 handed back.
	back := make([]byte, 4)
	_, err = io.ReadFull(free, back)
	require.NoError(t, err)
	assert.EqualValues(t, 1, binary.NativeEndian.Uint32(back))
}

// A child that misbehaves (a hostile input that took it over) can name
// no byte outside the ring, cut a record short, or shrink the ring under
// the reader: each is an error, never a fault.
func TestRingReaderRefusesAMisbehavingChild(t *testing.T) {
	for name, rec := range map[string][]byte{
		"slot out of range":  record(2, 10),
		"more than a slot":   record(0, 64<<10+1),
		"an empty slot":      record(0, 0),
		"a cut record":       record(0, 10)[:5],
		"a huge slot number": record(1<<31, 10),
	} {
		t.Run(name, func(t *testing.T) {
			r, records, _, _ := ringForTest(t)
			_, err := records.Write(rec)
			require.NoError(t, err)
			require.NoError(t, records.Close())
			_, err = io.ReadAll(r)
			require.Error(t, err)
		})
	}
	t.Run("shrinking the ring", func(t *testing.T) {
		_, _, mem, _ := ringForTest(t)
		err := unix.Ftruncate(int(mem.Fd()), 4096)
		require.ErrorIs(t, err, unix.EPERM, "the ring is sealed at its size")
	})
}
