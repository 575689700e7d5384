package blkhash

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// extent is one call in a test vector: n bytes of b, or with zero set a
// Zero(n) call (blkhash-test.c's '-').
type extent struct {
	b    byte
	n    int
	zero bool
}

func data(b byte, n int) extent { return extent{b: b, n: n} }
func hole(n int) extent         { return extent{n: n, zero: true} }

// libraryVectors are the cases and digests of blkhash 0.10.1's
// test/blkhash-test.c (sha256, 64 KiB blocks), the library blksum 0.10.1
// is built on; TestLibraryVectorsOnFilesMatchBlksum runs blksum on files
// holding the same bytes, holes for the zero calls.
var libraryVectors = []struct {
	name    string
	extents []extent
	want    string
}{
	{"block_data", []extent{data('A', BlockSize)}, "2e3a5f57d5e726ee5de62db1a85ff816f4fa6ea4627807d9a51bdc4c883e165e"},
	{"block_data_zero", []extent{data(0, BlockSize)}, "8ab067ab7939a3d4f40cbb118956c07c06aeae2d075d6e0a2ebbb94bd42832af"},
	{"block_zero", []extent{hole(BlockSize)}, "8ab067ab7939a3d4f40cbb118956c07c06aeae2d075d6e0a2ebbb94bd42832af"},
	{"partial_block_data", []extent{data('A', BlockSize/2)}, "9467334d6d7668a2f06898185b5cddc78cdfbd962f50c6bf250101f03a0e54dc"},
	{"partial_block_data_zero", []extent{data(0, BlockSize/2)}, "842d185f0ff348b0d689e184bddc47f69a19032a6934c89b879479f1e86f9d56"},
	{"partial_block_zero", []extent{hole(BlockSize / 2)}, "842d185f0ff348b0d689e184bddc47f69a19032a6934c89b879479f1e86f9d56"},
	{"sparse", []extent{hole(BlockSize * 8)}, "722ac11a3a81034edf196aa3ee68d1a2e345cd0838b0c78c2ce2fb015d4d817d"},
	{"sparse_large", []extent{hole(1 << 30)}, "c6d6562c3074a2caa0ceea3e1f460f3af678c792ed05e64157eb51e68ae5260d"},
	{"sparse_unaligned", []extent{hole(BlockSize * 8), hole(BlockSize / 2)}, "e623a5702b1feb08fbb3d18e35bbb7ec10146b8cd1bcff811200a3948c78c55c"},
	{"zero", []extent{data(0, BlockSize*8)}, "722ac11a3a81034edf196aa3ee68d1a2e345cd0838b0c78c2ce2fb015d4d817d"},
	{"zero_unaligned", []extent{data(0, BlockSize*8), data(0, BlockSize/2)}, "e623a5702b1feb08fbb3d18e35bbb7ec10146b8cd1bcff811200a3948c78c55c"},
	{"full", []extent{data('A', BlockSize/2), data('B', BlockSize/2), data('C', BlockSize/2),
		data('D', BlockSize/2), data('E', BlockSize/2), data('F', BlockSize/2)},
		"4ab1586084326f5beb911621282e9557cd26856105eff7f78cace5986af4738b"},
	{"full_unaligned", []extent{data('A', BlockSize/2), data('B', BlockSize/2), data('C', BlockSize/2),
		data('D', BlockSize/2), data('E', BlockSize/2)},
		"2cad558b3a2a8d87435e80fe7bae69fa664d92eaa1b9411f573b9fbb412a4d43"},
	{"mix", []extent{data('A', BlockSize/2), hole(BlockSize / 2), hole(BlockSize / 2), data(0, BlockSize/2),
		data('E', BlockSize/2), hole(BlockSize / 2), hole(BlockSize / 2), data(0, BlockSize/2)},
		"4b2b5acd96f8105f4fb26abaf35c7c5756338ef9ccce19ffe7714c9ad94b4398"},
	{"mix_unaligned", []extent{data('A', BlockSize/2), hole(BlockSize / 2), hole(BlockSize / 2), data(0, BlockSize/2),
		data('E', BlockSize/2), hole(BlockSize / 2), hole(BlockSize / 2)},
		"2510ac29c7103f2e68c672d728cbd43db4ed3dc809a24cde96e62dc5862a0f57"},
}

func TestHashMatchesBlkhashLibraryVectors(t *testing.T) {
	for _, v := range libraryVectors {
		for _, workers := range []int{1, 2, 7} {
			t.Run(fmt.Sprintf("%s/workers=%d", v.name, workers), func(t *testing.T) {
				h := New(workers)
				for _, e := range v.extents {
					if e.zero {
						h.Zero(int64(e.n))
					} else {
						_, _ = h.Write(bytes.Repeat([]byte{e.b}, e.n))
					}
				}
				assert.Equal(t, v.want, h.Sum().Hex())
			})
		}
	}
}

func TestAssemblerMatchesBlkhashLibraryVectorsInAnyOrder(t *testing.T) {
	for _, v := range libraryVectors {
		t.Run(v.name, func(t *testing.T) {
			type at struct {
				e   extent
				off int64
			}
			var calls []at
			var off int64
			for _, e := range v.extents {
				calls = append(calls, at{e, off})
				off += int64(e.n)
			}
			for _, reverse := range []bool{false, true} {
				a := NewAssembler(2)
				for i := range calls {
					c := calls[i]
					if reverse {
						c = calls[len(calls)-1-i]
					}
					if c.e.zero {
						require.NoError(t, a.ZeroAt(c.off, int64(c.e.n)))
					} else {
						_, err := a.WriteAt(bytes.Repeat([]byte{c.e.b}, c.e.n), c.off)
						require.NoError(t, err)
					}
				}
				got, err := a.Sum(off)
				require.NoError(t, err)
				assert.Equal(t, v.want, got.Hex(), "reverse=%v", reverse)
			}
		})
	}
}

func TestHashWriteSplitAnywhereGivesOneDigest(t *testing.T) {
	p := pattern(3*BlockSize+12345, 7)
	whole := New(2)
	_, _ = whole.Write(p)
	want := whole.Sum()
	for _, cut := range []int{1, 4096, BlockSize - 1, BlockSize, BlockSize + 1, 2*BlockSize + 99, len(p) - 1} {
		h := New(2)
		_, _ = h.Write(p[:cut])
		_, _ = h.Write(p[cut:])
		assert.Equal(t, want, h.Sum(), "cut at %d", cut)
	}
}

func TestReadFromEqualsWritingTheStream(t *testing.T) {
	p := pattern(2*streamReadSize+3*BlockSize+77, 11)
	whole := New(2)
	_, _ = whole.Write(p)
	h := New(2)
	n, err := h.ReadFrom(iotest.HalfReader(bytes.NewReader(p)))
	require.NoError(t, err)
	assert.EqualValues(t, len(p), n)
	assert.Equal(t, whole.Sum(), h.Sum())

	broken := New(2)
	_, err = broken.ReadFrom(io.MultiReader(bytes.NewReader(p[:1000]), iotest.ErrReader(io.ErrUnexpectedEOF)))
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "a truncated stream is an error, not an end")
}

func TestZeroEqualsWritingZeros(t *testing.T) {
	for _, n := range []int{1, 511, BlockSize - 1, BlockSize, 3*BlockSize + 7, 300 * BlockSize} {
		a, b := New(1), New(1)
		_, _ = a.Write([]byte("head"))
		_, _ = b.Write([]byte("head"))
		a.Zero(int64(n))
		_, _ = b.Write(make([]byte, n))
		assert.Equal(t, a.Sum(), b.Sum(), "n=%d", n)
	}
}

func TestParseDigestTakesBothSpellings(t *testing.T) {
	h := New(1)
	_, _ = h.Write([]byte("x"))
	d := h.Sum()
	for _, s := range []string{d.String(), d.Hex(), " " + d.Hex() + "\n"} {
		got, err := ParseDigest(s)
		require.NoError(t, err)
		assert.Equal(t, d, got)
	}
	for _, s := range []string{"", "sha256:" + d.Hex(), d.Hex()[:10], "blk-sha256:zz"} {
		_, err := ParseDigest(s)
		assert.Error(t, err, s)
	}
}

// pattern is n deterministic bytes that do not repeat within a block.
func pattern(n int, seed uint64) []byte {
	p := make([]byte, n)
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := range p {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		p[i] = byte(x)
	}
	return p
}

func TestBlockSumsGiveTheFileDigest(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "d.raw")
	data := make([]byte, 5*BlockSize+1234)
	copy(data[BlockSize:], bytes.Repeat([]byte{7}, BlockSize+99))
	data[len(data)-1] = 1
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var covered atomic.Int64
	d, sums, err := BlockSums(context.Background(), f, int64(len(data)), 2, &covered)
	if err != nil {
		t.Fatal(err)
	}
	if covered.Load() != int64(len(data)) {
		t.Fatalf("covered %d bytes of %d", covered.Load(), len(data))
	}
	h := New(1)
	h.Write(data)
	if want := h.Sum(); d != want || DigestOfSums(sums, int64(len(data))) != want {
		t.Fatalf("digest %s, of sums %s, want %s", d, DigestOfSums(sums, int64(len(data))), want)
	}
	if len(sums) != 6 || sums[0] != ZeroBlockSum() || sums[3] != ZeroBlockSum() || sums[5] != sha256.Sum256(data[5*BlockSize:]) {
		t.Fatalf("block sums wrong: %d of them", len(sums))
	}
}

// scanned is the zero map of p's blocks, as a writer that has scanned them
// hands it over.
func scanned(p []byte) []bool {
	var zero []bool
	for i := 0; i < len(p); i += BlockSize {
		zero = append(zero, bytes.Count(p[i:min(i+BlockSize, len(p))], []byte{0}) == min(BlockSize, len(p)-i))
	}
	return zero
}

func TestStartScannedTakesTheCallersZeroMap(t *testing.T) {
	p := make([]byte, 5*BlockSize+100)
	p[BlockSize+7], p[3*BlockSize], p[5*BlockSize+99] = 1, 2, 3 // blocks 1, 3 and the short tail hold data
	want := New(2)
	_, _ = want.Write(p)

	h := New(2)
	h.StartScanned(p, scanned(p))()
	assert.Equal(t, want.Sum(), h.Sum(), "a true map: the same digest as scanning")

	// A map that calls data block 1 zero is believed: the block is not
	// scanned again, so it hashes as a zero block.
	lying := scanned(p)
	lying[1] = true
	h = New(2)
	h.StartScanned(p, lying)()
	believed := New(2)
	_, _ = believed.Write(p[:BlockSize])
	believed.Zero(BlockSize)
	_, _ = believed.Write(p[2*BlockSize:])
	assert.Equal(t, believed.Sum(), h.Sum())
}

func TestStartScannedScansWhenTheMapDoesNotFit(t *testing.T) {
	p := make([]byte, 3*BlockSize)
	p[BlockSize+1] = 1
	lying := []bool{true, true, true} // wrong for block 1: must not be used
	want := New(1)
	_, _ = want.Write(p)

	t.Run("short map", func(t *testing.T) {
		h := New(1)
		h.StartScanned(p, lying[:2])()
		assert.Equal(t, want.Sum(), h.Sum())
	})
	t.Run("p does not start on a block boundary", func(t *testing.T) {
		h := New(1)
		h.StartScanned(p[:10], nil)()
		h.StartScanned(p[10:], lying)()
		assert.Equal(t, want.Sum(), h.Sum())
	})
}
