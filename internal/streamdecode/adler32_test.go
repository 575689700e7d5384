package streamdecode

import (
	"bytes"
	"hash/adler32"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAdler32IsHashAdler32(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 3<<20+13)
	for i := range random {
		random[i] = byte(rnd.Uint32())
	}
	// All 0xff is the worst case for the lanes and the reductions.
	for name, p := range map[string][]byte{
		"empty": nil, "one": {0x7f}, "seven": random[:7], "eight": random[:8], "grain": random[:64<<10],
		"odd length": random[:64<<10+5], "over a chunk": random, "0xff": bytes.Repeat([]byte{0xff}, 2<<20+3),
		"zeros": make([]byte, 100000),
	} {
		require.Equal(t, adler32.Checksum(p), adler32Sum(p), name)
	}
}

func BenchmarkAdler32(b *testing.B) {
	p := make([]byte, 64<<10)
	for i := range p {
		p[i] = byte(i * 7)
	}
	b.Run("ours", func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		for b.Loop() {
			adler32Sum(p)
		}
	})
	b.Run("hash/adler32", func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		for b.Loop() {
			adler32.Checksum(p)
		}
	})
}
