package blkhash

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"io"
	"runtime"
	"sync"

	"github.com/diskimport/engine/internal/iostage"
)

// streamReadSize is one read of ReadFrom; one buffer is read while the
// other is hashed.
const streamReadSize = 4 << 20

// Hash takes a disk's bytes in order. Its methods are for one goroutine;
// the blocks of each call are hashed on Workers goroutines.
type Hash struct {
	workers int
	outer   hash.Hash
	length  uint64
	pending []byte // a block begun by an earlier call
	n       int    // bytes in pending
	sums    [][Size]byte
	done    bool
	// blocks, when recording, holds every block's hash in order.
	recording bool
	blocks    []Sum
}

// Sum is the hash of one block.
type Sum = [Size]byte

// ZeroBlockSum is the hash of a whole block of zeros.
func ZeroBlockSum() Sum { return zeroBlockSum }

// New returns a Hash that hashes on workers goroutines (0: GOMAXPROCS, 2
// under a 750m quota too: one measured slower, see cpulimit.Workers).
func New(workers int) *Hash {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	return &Hash{workers: workers, outer: sha256.New(), pending: make([]byte, BlockSize)}
}

// Length is the number of bytes taken so far.
func (h *Hash) Length() int64 { return int64(h.length) }

// Write hashes p; it never fails.
func (h *Hash) Write(p []byte) (int, error) {
	h.Start(p)()
	return len(p), nil
}

// ReadFrom hashes r to its end, reading one buffer while the previous one
// is hashed; a read error (an EOF after a partial read included, as
// iostage.ReadChunk tells it) is returned with the bytes taken before it.
func (h *Hash) ReadFrom(r io.Reader) (int64, error) {
	start := h.Length()
	bufs := [2][]byte{make([]byte, streamReadSize), make([]byte, streamReadSize)}
	wait := func() {}
	for cur := 0; ; cur ^= 1 {
		n, eof, err := iostage.ReadChunk(r, bufs[cur])
		wait()
		if err != nil {
			return h.Length() - start, err
		}
		wait = h.Start(bufs[cur][:n])
		if eof {
			wait()
			return h.Length() - start, nil
		}
	}
}

// Start hashes p on the workers and returns at once, so the caller can
// write p out meanwhile. p must not change until wait has returned, and
// wait must be called before any other method of h.
func (h *Hash) Start(p []byte) (wait func()) {
	return h.StartScanned(p, nil)
}

// StartScanned is Start for bytes the caller has already scanned for
// zeros, so that no block is scanned twice: zero[i] tells whether
// p[i*BlockSize:(i+1)*BlockSize] holds only zeros. The map is used when p
// starts on a block boundary of the stream (nothing pending from an
// earlier call) and covers p's whole blocks; otherwise, or with a nil map,
// the blocks are scanned here.
func (h *Hash) StartScanned(p []byte, zero []bool) (wait func()) {
	if h.n > 0 || len(zero) < len(p)/BlockSize {
		zero = nil
	}
	h.length += uint64(len(p))
	if h.n > 0 {
		c := copy(h.pending[h.n:], p)
		h.n += c
		p = p[c:]
		if h.n == BlockSize {
			h.fold(blockSum(h.pending))
			h.n = 0
		}
	}
	full := len(p) / BlockSize
	if tail := p[full*BlockSize:]; len(tail) > 0 {
		h.n = copy(h.pending, tail) // pending is empty: p outlasted it
	}
	if full == 0 {
		return func() {}
	}
	if cap(h.sums) < full {
		h.sums = make([][Size]byte, full)
	}
	sums := h.sums[:full]
	wg := sumBlocks(p[:full*BlockSize], zero, sums, h.workers)
	return func() {
		wg.Wait()
		for i := range sums {
			h.fold(sums[i])
		}
	}
}

// sumBlocks hashes the whole blocks of p into sums on up to workers
// goroutines, each taking a contiguous share; zero, when not nil, tells
// which blocks hold only zeros. A share is at least one batch of the
// machine's hashing (16 blocks in lanes, 2 in pairs): two half-full
// batches cost twice the CPU of one full one.
func sumBlocks(p []byte, zero []bool, sums [][Size]byte, workers int) *sync.WaitGroup {
	var wg sync.WaitGroup
	n := len(sums)
	mode := hashingHere()
	w := max(1, min(workers, n/mode.batch()))
	for i := range w {
		lo, hi := i*n/w, (i+1)*n/w
		wg.Go(func() { sumShare(p, zero, sums, lo, hi, mode) })
	}
	return &wg
}

// sumShare hashes blocks lo to hi-1 of p into sums: a zero block takes
// the precomputed hash, data blocks go in batches of mode (16 in lanes,
// 2 in pairs, 1), a batch smaller than its mode takes the next smaller.
func sumShare(p []byte, zero []bool, sums []Sum, lo, hi int, mode hashing) {
	var batch [lanes]int
	k := 0
	flush := func() {
		switch {
		case mode == inLanes && k >= minLanes:
			sumInLanes(p, batch[:k], sums)
			k = 0
		case mode != oneByOne && havePairs:
			for ; k >= 2; k -= 2 {
				b0, b1 := batch[k-2], batch[k-1]
				sumPair(p[b0*BlockSize:(b0+1)*BlockSize], p[b1*BlockSize:(b1+1)*BlockSize], &sums[b0], &sums[b1])
			}
		}
		for _, b := range batch[:k] {
			sums[b] = sha256.Sum256(p[b*BlockSize : (b+1)*BlockSize])
		}
		k = 0
	}
	for b := lo; b < hi; b++ {
		block := p[b*BlockSize : (b+1)*BlockSize]
		if zero != nil && zero[b] || zero == nil && iostage.IsZero(block) {
			sums[b] = zeroBlockSum
			continue
		}
		if mode == inLanes && k > 0 && b-batch[0] > maxLaneSpan {
			flush()
		}
		batch[k] = b
		k++
		if k == mode.batch() {
			flush()
		}
	}
	flush()
}

// Zero hashes n zero bytes without reading or hashing any: whole blocks
// cost one update of the outer hash each.
func (h *Hash) Zero(n int64) {
	h.length += uint64(n)
	if h.n > 0 {
		c := int(min(n, int64(BlockSize-h.n)))
		clear(h.pending[h.n : h.n+c])
		h.n += c
		n -= int64(c)
		if h.n == BlockSize {
			h.fold(blockSum(h.pending))
			h.n = 0
		}
	}
	foldZeroBlocks(h.outer, n/BlockSize)
	if h.recording {
		for range n / BlockSize {
			h.blocks = append(h.blocks, zeroBlockSum)
		}
	}
	if rest := int(n % BlockSize); rest > 0 {
		clear(h.pending[:rest])
		h.n = rest
	}
}

// zeroSums is zeroBlockSum repeated, to fold many zero blocks per update.
var zeroSums = func() []byte {
	b := make([]byte, 0, 256*Size)
	for range 256 {
		b = append(b, zeroBlockSum[:]...)
	}
	return b
}()

// foldZeroBlocks adds the hashes of k zero blocks to outer: 256 per write,
// so a 1 TiB hole is 512 MiB of SHA-256 input in 64 Ki writes.
func foldZeroBlocks(outer hash.Hash, k int64) {
	for k > 0 {
		c := min(k, int64(len(zeroSums)/Size))
		outer.Write(zeroSums[:c*Size])
		k -= c
	}
}

func (h *Hash) fold(sum [Size]byte) {
	h.outer.Write(sum[:])
	if h.recording {
		h.blocks = append(h.blocks, sum)
	}
}

// DigestOfSums is the digest of a disk of length bytes whose blocks hash
// to sums, in order (what Sum gives for those bytes).
func DigestOfSums(sums []Sum, length int64) Digest {
	outer := sha256.New()
	for i := 0; i < len(sums); i += 256 {
		outer.Write(sumBytes(sums[i:min(i+256, len(sums))]))
	}
	outer.Write(binary.LittleEndian.AppendUint64(nil, uint64(length)))
	var d Digest
	outer.Sum(d[:0])
	return d
}

// sumBytes is sums as one byte slice, for one hash update per 256.
func sumBytes(sums []Sum) []byte {
	b := make([]byte, 0, len(sums)*Size)
	for i := range sums {
		b = append(b, sums[i][:]...)
	}
	return b
}

// Sum finishes the hash: the pending short block, then the length. Call
// it once; h takes nothing after it.
func (h *Hash) Sum() Digest {
	if !h.done {
		h.done = true
		if h.n > 0 {
			h.fold(blockSum(h.pending[:h.n]))
			h.n = 0
		}
		h.outer.Write(binary.LittleEndian.AppendUint64(nil, h.length))
	}
	var d Digest
	h.outer.Sum(d[:0])
	return d
}

// SumBlocks returns the hash of every block of p, in order (the last may
// be short), hashed on workers goroutines (0: GOMAXPROCS).
func SumBlocks(p []byte, workers int) []Sum {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	full := len(p) / BlockSize
	sums := make([]Sum, full, full+1)
	if full > 0 {
		sumBlocks(p[:full*BlockSize], nil, sums, workers).Wait()
	}
	if tail := p[full*BlockSize:]; len(tail) > 0 {
		sums = append(sums, blockSum(tail))
	}
	return sums
}
