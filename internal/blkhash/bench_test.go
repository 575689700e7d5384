package blkhash

import (
	"crypto/sha256"
	"testing"
)

// The reference is crypto/sha256 on one core over the same bytes: blkhash
// should reach it times the cores on data, and far more on zeros and holes.
func BenchmarkSHA256OneCore(b *testing.B) {
	p := pattern(8<<20, 1)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		sha256.Sum256(p)
	}
}

func BenchmarkHashData(b *testing.B) {
	p := pattern(8<<20, 1)
	h := New(0)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		_, _ = h.Write(p)
	}
}

func BenchmarkHashZeroData(b *testing.B) {
	p := make([]byte, 8<<20)
	h := New(0)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		_, _ = h.Write(p)
	}
}

func BenchmarkHashHole(b *testing.B) {
	h := New(0)
	b.SetBytes(1 << 30)
	for b.Loop() {
		h.Zero(1 << 30)
	}
}

func BenchmarkAssemblerData(b *testing.B) {
	p := pattern(8<<20, 1)
	a := NewAssembler(0)
	b.SetBytes(int64(len(p)))
	var off int64
	for b.Loop() {
		_, _ = a.WriteAt(p, off)
		off += int64(len(p))
	}
}
