package cloner

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
)

// TestRecordsEncoderPacksWhatShrinks: bare records of a source that
// compresses, then of one that does not, then compresses again decode to
// the same runs; the compressible ones cross the wire packed, in far
// fewer bytes, and the incompressible ones as they are, tried for packing
// once in a doubling stretch (1, 2, 4 ... records skipped after each
// miss).
func TestRecordsEncoderPacksWhatShrinks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	text := func() []byte {
		return bytes.Repeat([]byte("a line of a guest's log file, 0123456789\n"), (1<<20)/41)
	}
	random := func() []byte {
		b := make([]byte, 1<<20)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	var runs [][]byte
	for range 3 {
		runs = append(runs, text())
	}
	for range 12 {
		runs = append(runs, random())
	}
	for range 40 {
		runs = append(runs, text())
	}
	var wire bytes.Buffer
	enc := NewRecordsEncoder(&wire)
	require.NoError(t, enc.Start(1<<40, 0))
	var off int64
	tried := 0
	for i, p := range runs {
		before := enc.skipLeft
		require.NoError(t, enc.Data(off, p))
		if before == 0 {
			tried++
		}
		if i == 2 {
			assert.Less(t, wire.Len(), 3*(1<<20)/8, "three compressible records packed")
		}
		off += int64(len(p))
	}
	require.NoError(t, enc.End([32]byte{}))
	// The 3 text records; 4 of the 12 random ones (1, 2, 4 and 8 skipped
	// after each miss); the 40 text ones but the 7 still skipped.
	assert.Equal(t, 3+4+33, tried, "records tried for packing")

	dec := NewDecoder(bytes.NewReader(wire.Bytes()))
	rec, err := dec.Next()
	require.NoError(t, err)
	require.True(t, rec.IsStart())
	off = 0
	for i, p := range runs {
		rec, err := dec.Next()
		require.NoError(t, err)
		require.True(t, rec.IsData(), "record %d", i)
		assert.Equal(t, off, rec.Offset)
		assert.Equal(t, int64(len(p)), rec.Length)
		assert.True(t, bytes.Equal(p, rec.Data), "record %d's bytes", i)
		off += int64(len(p))
	}
	rec, err = dec.Next()
	require.NoError(t, err)
	assert.True(t, rec.IsEnd())
	_, err = dec.Next()
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

// TestHostilePackedRecordsAreMalformed: a packed record that lies about
// its length, claims more than a data record may hold or a block larger
// than any s2 makes, holds no s2 block, or ends early is refused as a
// malformed stream (or an unexpected end).
func TestHostilePackedRecordsAreMalformed(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 8<<10) // 128 KiB
	var good bytes.Buffer
	enc := NewRecordsEncoder(&good)
	require.NoError(t, enc.Data(0, data))
	require.Equal(t, byte(recordPacked), good.Bytes()[0], "the encoder packed it")
	block := good.Bytes()[25:]
	packed := func(n, size uint64, block []byte) []byte {
		var e Encoder
		return append(bytes.Clone(e.headBytes(recordPacked, 0, n, size)), block...)
	}
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"a length the block does not hold", packed(uint64(len(data))-1, uint64(len(block)), block)},
		{"a length over a data record's", packed(maxDataRecord+1, uint64(len(block)), block)},
		{"a block larger than s2 makes", packed(uint64(len(data)), uint64(maxPackedRecord())+1, block)},
		{"no length", packed(0, uint64(len(block)), block)},
		{"no s2 block", packed(uint64(len(data)), 64, bytes.Repeat([]byte{0xff}, 64))},
		{"a block cut short", packed(uint64(len(data)), uint64(len(block)), block[:len(block)/2])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewDecoder(bytes.NewReader(tc.body)).Next()
			require.Error(t, err)
			if tc.name == "a block cut short" {
				assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
				return
			}
			assert.True(t, IsMalformed(err), "%v", err)
			assert.ErrorIs(t, err, errdefs.ErrInvalidImage)
		})
	}
}
