package blkhash

import "encoding/binary"

// hashing is how this machine hashes data blocks: one at a time
// (crypto/sha256, SHA-NI where the CPU has it), two at a time with the
// SHA extensions (sha256x2), or 16 in AVX-512 lanes (sha256x16).
type hashing int

const (
	oneByOne hashing = iota
	inPairs
	inLanes
)

// batch is how many blocks one hashing call takes.
func (m hashing) batch() int {
	switch m {
	case inLanes:
		return lanes
	case inPairs:
		return 2
	}
	return 1
}

// hashingHere is this machine's hashing: lanes where they are measured
// faster (useLanes), else pairs where the CPU has the SHA extensions. On
// this project's 2-core AMD EPYC (SHA-NI, no AVX-512) two 64 KiB blocks
// take 44 us in pairs and 85 us one by one (BenchmarkSumPair).
func hashingHere() hashing {
	switch {
	case useLanes():
		return inLanes
	case havePairs:
		return inPairs
	}
	return oneByOne
}

// sumPair hashes two whole blocks at once (sha256x2) into sa and sb.
func sumPair(a, b []byte, sa, sb *Sum) {
	var state [2][8]uint32
	state[0], state[1] = sha256IV, sha256IV
	sha256x2(&state, &a[0], &b[0], BlockSize/64)
	sha256x2(&state, &blockPad[0], &blockPad[0], 1)
	for w := range 8 {
		binary.BigEndian.PutUint32(sa[4*w:], state[0][w])
		binary.BigEndian.PutUint32(sb[4*w:], state[1][w])
	}
}
