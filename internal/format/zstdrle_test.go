package format

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/diskimport/engine/errdefs"
)

// runsDisk is a disk's worth of runs zstd stores as RLE blocks (zeros,
// 0xAA, and a run shorter than a block) between random bytes.
func runsDisk(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	rnd := make([]byte, 300<<10)
	for i := range rnd {
		rnd[i] = byte(i*7919 + i>>9*31)
	}
	b.Write(rnd[:70000])
	b.Write(make([]byte, 1<<20))
	b.Write(bytes.Repeat([]byte{0xAA}, 600<<10))
	b.Write(rnd)
	b.Write(bytes.Repeat([]byte{0x55}, 5000))
	b.Write(make([]byte, 3<<20))
	b.Write(rnd[:12345])
	return b.Bytes()
}

// blockTypes counts the block types of the frames in s (skippable frames
// skipped).
func blockTypes(t *testing.T, s []byte) map[uint32]int {
	t.Helper()
	types := map[uint32]int{}
	for len(s) > 0 {
		magic := binary.LittleEndian.Uint32(s)
		if magic&zstdSkippableMask == zstdSkippableMagic {
			s = s[8+binary.LittleEndian.Uint32(s[4:]):]
			continue
		}
		require.Equal(t, uint32(zstdFrameMagic), magic)
		var h zstd.Header
		require.NoError(t, h.Decode(s))
		s = s[h.HeaderSize:]
		for {
			hdr := uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16
			typ, size := (hdr>>1)&3, int(hdr>>3)
			types[typ]++
			s = s[3:]
			if typ == zstdBlockRLE {
				size = 1
			}
			s = s[size:]
			if hdr&1 != 0 {
				break
			}
		}
		if h.HasCheckSum {
			s = s[4:]
		}
	}
	return types
}

func TestRLEAsRawKeepsTheStreamAndLeavesNoRLEBlock(t *testing.T) {
	data := runsDisk(t)
	frame := zstdCompress(t, "zstd", data)
	// Two frames, a skippable frame before them (pzstd's kind) and one
	// between, as concatenated .zst files are.
	skip := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, zstdSkippableMagic|3), 5)
	skip = append(skip, "12345"...)
	stream := append(append(append(append([]byte{}, skip...), frame...), skip...), frame...)
	before := blockTypes(t, stream)
	require.Positive(t, before[zstdBlockRLE], "the test stream must hold RLE blocks")

	// An empty read in the middle of the skippable frame's bytes.
	z := newRLEAsRaw(bytes.NewReader(stream))
	head := make([]byte, 8)
	_, err := io.ReadFull(z, head)
	require.NoError(t, err)
	n, err := z.Read(nil)
	require.Zero(t, n)
	require.NoError(t, err)
	rest, err := io.ReadAll(z)
	require.NoError(t, err)
	rewritten := append(head, rest...)
	require.NoError(t, err)
	after := blockTypes(t, rewritten)
	require.Zero(t, after[zstdBlockRLE])
	require.Equal(t, before[zstdBlockRaw]+before[zstdBlockRLE], after[zstdBlockRaw])

	d, err := NewDecompressor(context.Background(), Zstd, bytes.NewReader(stream), Options{})
	require.NoError(t, err)
	defer d.Close()
	got, err := io.ReadAll(d)
	require.NoError(t, err)
	want := sha256.Sum256(append(append([]byte{}, data...), data...))
	require.Equal(t, want, sha256.Sum256(got))
}

func TestRLEAsRawTruncatedStreamFailsAtEveryCut(t *testing.T) {
	frame := zstdCompress(t, "zstd", runsDisk(t))
	// Cuts in the frame header, in and right after block headers, at an
	// RLE block's byte, in the checksum.
	cuts := []int{1, 4, 5, 6, 9, 10, 11, len(frame) / 3, len(frame) / 2, len(frame) - 4, len(frame) - 1}
	for _, cut := range cuts {
		d, err := NewDecompressor(context.Background(), Zstd, bytes.NewReader(frame[:cut]), Options{})
		if err == nil {
			_, err = io.ReadAll(d)
			d.Close()
		}
		require.Error(t, err, "cut at %d of %d", cut, len(frame))
		require.ErrorIs(t, err, errdefs.ErrInvalidImage, "cut at %d", cut)
	}
}

func TestRLEAsRawPassesAReservedBlockToTheDecoder(t *testing.T) {
	frame := zstdCompress(t, "zstd", make([]byte, 1<<20))
	var h zstd.Header
	require.NoError(t, h.Decode(frame))
	bad := append([]byte{}, frame...)
	bad[h.HeaderSize] |= zstdBlockReserved << 1
	d, err := NewDecompressor(context.Background(), Zstd, bytes.NewReader(bad), Options{})
	if err == nil {
		_, err = io.ReadAll(d)
		d.Close()
	}
	require.ErrorIs(t, err, errdefs.ErrInvalidImage)
}

func TestRLEAsRawBlockHoldsItsBytesWhateverCameBefore(t *testing.T) {
	// rawBlock reuses the bytes of the block before when they are the
	// same byte: each block must still be its own size of its own byte,
	// after a shorter block of that byte, another byte, or a longer one.
	var z rleAsRaw
	for i, c := range []struct {
		size int
		v    byte
	}{
		{100, 0}, {zstdMaxBlock, 0}, {5000, 0xAA}, {zstdMaxBlock, 0xAA}, {7, 0xAA},
		{zstdMaxBlock, 0}, {1, 0}, {zstdMaxBlock, 0x55}, {zstdMaxBlock, 0}, {0, 0}, {zstdMaxBlock, 0},
	} {
		last := i%2 == 1
		b := z.rawBlock(last, c.size, c.v)
		h := uint32(c.size)<<3 | zstdBlockRaw<<1
		if last {
			h |= 1
		}
		require.Equal(t, []byte{byte(h), byte(h >> 8), byte(h >> 16)}, b[:3], "block %d's header", i)
		require.Equal(t, bytes.Repeat([]byte{c.v}, c.size), b[3:], "block %d: %d bytes of %#x", i, c.size, c.v)
	}
}
