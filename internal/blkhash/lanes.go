package blkhash

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"sync"
	"time"
)

// A data block is hashed either on its own (crypto/sha256, SHA-NI where
// the CPU has it) or with up to 15 others in the 32-bit lanes of AVX-512
// registers (sha256x16_amd64.s). On this project's 2-core Xeon, 16 blocks
// take 0.38 ms in lanes and 0.81 ms one by one (2.1×), so a batch of
// minLanes blocks or more goes in lanes, the idle lanes repeating its last
// block, and fewer go one by one.
const (
	lanes    = 16
	minLanes = 8
)

// maxLaneSpan bounds how far apart the blocks of one batch may lie: the
// kernel takes 32-bit offsets from the batch's first block.
const maxLaneSpan = math.MaxUint32/BlockSize - 1

// sha256IV is SHA-256's initial state (FIPS 180-4, 5.3.3).
var sha256IV = [8]uint32{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}

// blockPad is the final SHA-256 block of every whole block: the 0x80
// byte, zeros, and the message's length in bits, big-endian.
var blockPad = func() (pad [64]byte) {
	pad[0] = 0x80
	binary.BigEndian.PutUint64(pad[56:], BlockSize*8)
	return pad
}()

// sumInLanes hashes the whole blocks of p whose indices are in blocks (1
// to 16, ascending, within maxLaneSpan of the first) into sums[index].
func sumInLanes(p []byte, blocks []int, sums []Sum) {
	var state [8][lanes]uint32
	for w := range state {
		for l := range lanes {
			state[w][l] = sha256IV[w]
		}
	}
	first := blocks[0]
	var offsets [lanes]uint32
	for l := range lanes {
		offsets[l] = uint32((blocks[min(l, len(blocks)-1)] - first) * BlockSize)
	}
	sha256x16(&state, &p[first*BlockSize], &offsets, BlockSize/64)
	var padOffsets [lanes]uint32 // every lane ends with the same block
	sha256x16(&state, &blockPad[0], &padOffsets, 1)
	for l, b := range blocks {
		for w := range state {
			binary.BigEndian.PutUint32(sums[b][4*w:], state[w][l])
		}
	}
}

// useLanes says whether to hash in lanes on this machine: the CPU has the
// instructions and, measured once per process on 16 blocks (1 MiB, best
// of 3 each way), lanes take under 4/5 of the time one by one does, which
// may not hold where SHA-NI is fast and AVX-512 is not (half-width units).
var useLanes = sync.OnceValue(func() bool {
	if !haveLanes {
		return false
	}
	p := make([]byte, lanes*BlockSize)
	p[0] = 1 // the measured blocks need not differ, but say what they hash
	var blocks [lanes]int
	for i := range blocks {
		blocks[i] = i
	}
	sums := make([]Sum, lanes)
	best := func(hash func()) time.Duration {
		d := time.Duration(math.MaxInt64)
		for range 3 {
			start := time.Now()
			hash()
			d = min(d, time.Since(start))
		}
		return d
	}
	inLanes := best(func() { sumInLanes(p, blocks[:], sums) })
	oneByOne := best(func() {
		for b := range lanes {
			sums[b] = sha256.Sum256(p[b*BlockSize : (b+1)*BlockSize])
		}
	})
	return inLanes < oneByOne*4/5
})
