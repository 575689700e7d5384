package blkhash

import (
	"crypto/sha256"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLanesHashAsSHA256Does: blocks hashed 16 at a time in AVX-512 lanes
// get the hashes crypto/sha256 gives each, for every batch from a single
// block to 16, with zero blocks (not hashed) and data blocks interleaved
// so that the lanes read scattered offsets, and for shares that are not
// multiples of 16.
func TestLanesHashAsSHA256Does(t *testing.T) {
	if !haveLanes {
		t.Skip("this CPU has no AVX-512: blocks are hashed one by one")
	}
	r := rand.New(rand.NewPCG(37, 16))
	const n = 70
	p := make([]byte, n*BlockSize)
	zero := make([]bool, n)
	for b := range n {
		if r.IntN(4) == 0 {
			zero[b] = true
			continue
		}
		block := p[b*BlockSize : (b+1)*BlockSize]
		for i := range block {
			block[i] = byte(r.Uint32())
		}
		if b%9 == 0 {
			clear(block[:BlockSize-1]) // all zeros but its last byte
		}
	}
	want := make([]Sum, n)
	for b := range n {
		want[b] = sha256.Sum256(p[b*BlockSize : (b+1)*BlockSize])
	}
	for k := 1; k <= lanes; k++ {
		var blocks []int
		for b := 0; len(blocks) < k; b += 3 {
			blocks = append(blocks, b%n)
		}
		got := make([]Sum, n)
		sumInLanes(p, blocks, got)
		for _, b := range blocks {
			require.Equal(t, want[b], got[b], "batch of %d, block %d", k, b)
		}
	}
	for _, span := range [][2]int{{0, n}, {5, 22}, {3, 10}, {17, 50}} {
		for _, m := range [][]bool{zero, nil} {
			got := make([]Sum, n)
			sumShare(p, m, got, span[0], span[1], inLanes)
			for b := span[0]; b < span[1]; b++ {
				require.Equal(t, want[b], got[b], "share %v, block %d, zero map %v", span, b, m != nil)
			}
		}
	}
}

// BenchmarkLanes and BenchmarkOneByOne hash the same 16 data blocks (1
// MiB): the measurement behind minLanes and useLanes.
func BenchmarkLanes(b *testing.B) {
	if !haveLanes {
		b.Skip("no AVX-512")
	}
	p := pattern(lanes*BlockSize, 1)
	blocks := make([]int, lanes)
	for i := range blocks {
		blocks[i] = i
	}
	sums := make([]Sum, lanes)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		sumInLanes(p, blocks, sums)
	}
}

func BenchmarkOneByOne(b *testing.B) {
	p := pattern(lanes*BlockSize, 1)
	sums := make([]Sum, lanes)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		sumShare(p, nil, sums, 0, lanes, oneByOne)
	}
}

// TestAssemblerBatchesSmallWritesAndLaterWritesStillWin: whole blocks
// written a few at a time wait in the Assembler's batch for their lanes;
// blocks written again, zeroed again or written as zeros in between must
// still end as the last write left them. Block 0 is written last, so
// nothing is folded before the end and every rewrite is allowed.
func TestAssemblerBatchesSmallWritesAndLaterWritesStillWin(t *testing.T) {
	const blocks = 100
	size := int64(blocks * BlockSize)
	exp := make([]byte, size)
	r := rand.New(rand.NewPCG(38, 7))
	a := NewAssembler(2)
	var last [2]int64 // the last write's range, which the batch may still hold
	for range 400 {
		b := 1 + r.IntN(blocks-8)
		k := 1 + r.IntN(minLanes-1)
		lo, hi := int64(b)*BlockSize, int64(b+k)*BlockSize
		op := r.IntN(10)
		if op >= 7 && r.IntN(2) == 0 {
			lo, hi = last[0], last[1]
		}
		switch {
		case op < 7:
			for i := lo; i < hi; i++ {
				exp[i] = byte(r.Uint32())
			}
			_, err := a.WriteAt(exp[lo:hi], lo)
			require.NoError(t, err)
			last = [2]int64{lo, hi}
		case op < 9:
			clear(exp[lo:hi])
			require.NoError(t, a.ZeroAt(lo, hi-lo))
		default:
			clear(exp[lo:hi])
			_, err := a.WriteAt(make([]byte, hi-lo), lo)
			require.NoError(t, err)
		}
	}
	for i := range BlockSize {
		exp[i] = byte(i)
	}
	_, err := a.WriteAt(exp[:BlockSize], 0)
	require.NoError(t, err)
	got, err := a.Sum(size)
	require.NoError(t, err)
	h := New(1)
	_, _ = h.Write(exp)
	require.Equal(t, h.Sum(), got)
}
