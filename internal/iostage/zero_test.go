package iostage

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIsZeroFindsAnyNonZeroByte(t *testing.T) {
	assert.True(t, IsZero(nil))
	assert.True(t, IsZero(make([]byte, 1)))
	for _, n := range []int{1, 2, 7, 8, 9, 4096, 64<<10 + 3} {
		for _, at := range []int{0, n / 2, n - 1} {
			p := make([]byte, n)
			assert.True(t, IsZero(p), "%d zeros", n)
			p[at] = 0x80
			assert.False(t, IsZero(p), "%d bytes, non-zero at %d", n, at)
		}
	}
}

// zeroKernels are IsZero and each block kernel this CPU has, with the
// shifted compare for the bytes after its blocks.
func zeroKernels() map[string]func([]byte) bool {
	ks := map[string]func([]byte) bool{"IsZero": IsZero}
	withTail := func(blocks func(*byte, int) bool) func([]byte) bool {
		return func(p []byte) bool {
			n := len(p) / 256
			return (n == 0 || blocks(&p[0], n)) && isZeroShifted(p[n*256:])
		}
	}
	if haveZero512 {
		ks["AVX-512"] = withTail(zeroBlocks512)
	}
	if haveZero256 {
		ks["AVX2"] = withTail(zeroBlocks256)
	}
	return ks
}

// Every byte of buffers around the 256-byte blocks of the AVX-512 and
// AVX2 paths, aligned or not, is looked at: one non-zero byte anywhere is
// found, by each kernel this CPU has.
func TestIsZeroFindsAByteAnywhereInTheBlocks(t *testing.T) {
	for name, isZero := range zeroKernels() {
		for _, n := range []int{255, 256, 257, 511, 512, 1024 + 17} {
			for _, shift := range []int{0, 3} {
				buf := make([]byte, n+shift)
				p := buf[shift:]
				require.True(t, isZero(p), "%s: %d zeros at offset %d", name, n, shift)
				for at := range p {
					p[at] = 1
					if isZero(p) {
						t.Fatalf("%s: %d bytes at offset %d: the byte at %d went unseen", name, n, shift, at)
					}
					p[at] = 0
				}
			}
		}
	}
}

// BenchmarkIsZero measures IsZero against the strategies it replaced, over
// all-zero buffers (the worst case: every byte compared).
func BenchmarkIsZero(b *testing.B) {
	page := make([]byte, 64<<10)
	variants := []struct {
		name string
		f    func([]byte) bool
	}{
		{"IsZero", IsZero},
		{"AVX2", zeroKernels()["AVX2"]}, // nil without AVX2
		{"shifted", isZeroShifted},
		{"zeroPage", func(p []byte) bool { return isZeroAgainst(p, page) }},
		{"words8", isZeroWords},
		{"byteLoop", isZeroByteLoop},
	}
	for _, size := range []struct {
		name string
		n    int
	}{{"4KiB", 4 << 10}, {"64KiB", 64 << 10}, {"4MiB", 4 << 20}} {
		p := make([]byte, size.n)
		for _, v := range variants {
			if v.f == nil {
				continue
			}
			b.Run(v.name+"/"+size.name, func(b *testing.B) {
				b.SetBytes(int64(size.n))
				for b.Loop() {
					if !v.f(p) {
						b.Fatal("not zero")
					}
				}
			})
		}
	}
}

func isZeroAgainst(p, zeros []byte) bool {
	for len(p) > 0 {
		n := min(len(p), len(zeros))
		if !bytes.Equal(p[:n], zeros[:n]) {
			return false
		}
		p = p[n:]
	}
	return true
}

func isZeroWords(p []byte) bool {
	for len(p) >= 8 {
		if *(*uint64)(unsafe.Pointer(&p[0])) != 0 {
			return false
		}
		p = p[8:]
	}
	return isZeroByteLoop(p)
}

func isZeroByteLoop(p []byte) bool {
	for _, c := range p {
		if c != 0 {
			return false
		}
	}
	return true
}
