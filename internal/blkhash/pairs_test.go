package blkhash

import (
	"crypto/sha256"
	"testing"

	"github.com/stretchr/testify/require"
)

// Two blocks hashed together have the hashes crypto/sha256 gives each,
// whatever their bytes: random, zeros, one byte different.
func TestSumPairMatchesSHA256(t *testing.T) {
	if !havePairs {
		t.Skip("SKIP: this CPU has no SHA extensions: blocks are hashed one at a time")
	}
	r := pattern(4*BlockSize, 7)
	zero := make([]byte, BlockSize)
	flipped := append([]byte(nil), r[:BlockSize]...)
	flipped[BlockSize-1] ^= 1
	cases := [][2][]byte{
		{r[:BlockSize], r[BlockSize : 2*BlockSize]},
		{r[2*BlockSize : 3*BlockSize], zero},
		{zero, r[3*BlockSize:]},
		{r[:BlockSize], flipped},
	}
	for i, c := range cases {
		var sa, sb Sum
		sumPair(c[0], c[1], &sa, &sb)
		require.Equal(t, Sum(sha256.Sum256(c[0])), sa, "case %d, first", i)
		require.Equal(t, Sum(sha256.Sum256(c[1])), sb, "case %d, second", i)
	}
}

func BenchmarkSumPair(b *testing.B) {
	if !havePairs {
		b.Skip("no SHA extensions")
	}
	p := pattern(2*BlockSize, 8)
	var sa, sb Sum
	b.SetBytes(2 * BlockSize)
	for b.Loop() {
		sumPair(p[:BlockSize], p[BlockSize:], &sa, &sb)
	}
}

func BenchmarkSumOneByOne(b *testing.B) {
	p := pattern(2*BlockSize, 8)
	b.SetBytes(2 * BlockSize)
	for b.Loop() {
		sha256.Sum256(p[:BlockSize])
		sha256.Sum256(p[BlockSize:])
	}
}

// A share hashed in pairs (odd counts, zero blocks between, a zero map or
// none) gets the hashes crypto/sha256 gives each block.
func TestSharesInPairsHashAsSHA256Does(t *testing.T) {
	if !havePairs {
		t.Skip("SKIP: this CPU has no SHA extensions: blocks are hashed one at a time")
	}
	const n = 23
	p := pattern(n*BlockSize, 9)
	zero := make([]bool, n)
	for _, b := range []int{2, 3, 7, 12, 13, 14, 22} {
		zero[b] = true
		clear(p[b*BlockSize : (b+1)*BlockSize])
	}
	want := make([]Sum, n)
	for b := range n {
		want[b] = sha256.Sum256(p[b*BlockSize : (b+1)*BlockSize])
	}
	for _, span := range [][2]int{{0, n}, {1, 2}, {4, 9}, {3, 16}, {11, 23}} {
		for _, m := range [][]bool{zero, nil} {
			got := make([]Sum, n)
			sumShare(p, m, got, span[0], span[1], inPairs)
			for b := span[0]; b < span[1]; b++ {
				require.Equal(t, want[b], got[b], "share %v, block %d, zero map %v", span, b, m != nil)
			}
		}
	}
}
