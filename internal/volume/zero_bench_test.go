package volume

import (
	"encoding/binary"
	"testing"
)

// BenchmarkIsZero measures zero detection over a 4 MiB chunk in 64 KiB
// granules: all zeros (worst case, every byte compared) and random data
// (best case, first word differs).
func BenchmarkIsZero(b *testing.B) {
	zeros := alignedBuf(headSize)
	chunk := alignedBuf(chunkSize)
	run := func(b *testing.B, f func([]byte) bool) {
		b.SetBytes(chunkSize)
		for b.Loop() {
			for i := 0; i < chunkSize; i += granule {
				if !f(chunk[i : i+granule]) {
					b.Fatal("not zero")
				}
			}
		}
	}
	b.Run("bytesEqual/zero", func(b *testing.B) { run(b, func(p []byte) bool { return isZero(p, zeros) }) })
	b.Run("words8/zero", func(b *testing.B) { run(b, isZeroWords) })
}

// isZeroWords is the 8-bytes-at-a-time alternative, kept here for comparison.
func isZeroWords(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
