package cloner_test

import (
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/diskimport/engine/internal/cloner"
	"github.com/diskimport/engine/internal/iostage"
)

// plainTreeDigest is the definition, computed the slow way.
func plainTreeDigest(b []byte) [sha256.Size]byte {
	outer := sha256.New()
	for off := 0; off < len(b); off += 1 << 20 {
		h := sha256.Sum256(b[off:min(off+1<<20, len(b))])
		outer.Write(h[:])
	}
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	outer.Write(n[:])
	var out [sha256.Size]byte
	copy(out[:], outer.Sum(nil))
	return out
}

// TestDigestIndependentOfSplit: however the content is cut into data and
// zero runs, the digest is the definition's.
func TestDigestIndependentOfSplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 5<<20+12345)
	for off := 0; off < len(b); off += 64 << 10 {
		if rng.IntN(3) == 0 {
			for i := off; i < min(off+64<<10, len(b)); i++ {
				b[i] = byte(rng.Uint32())
			}
		}
	}
	want := plainTreeDigest(b)
	for trial := 0; trial < 20; trial++ {
		d := cloner.NewDigest()
		for off := 0; off < len(b); {
			n := min(1+rng.IntN(3<<20), len(b)-off)
			chunk := b[off : off+n]
			if iostage.IsZero(chunk) && rng.IntN(2) == 0 {
				d.Zeros(int64(n))
			} else {
				d.Data(chunk)
			}
			off += n
		}
		assert.Equal(t, want, d.Sum(), "trial %d", trial)
	}
	other := append([]byte(nil), b...)
	other[len(other)/2] ^= 1
	assert.NotEqual(t, want, plainTreeDigest(other))
}
