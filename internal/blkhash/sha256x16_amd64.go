package blkhash

import "golang.org/x/sys/cpu"

// haveLanes says whether this CPU has the AVX-512 instructions
// sha256x16 uses (AVX512F; AVX512BW for the byte swap).
var haveLanes = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW

// sha256x16 runs SHA-256's compression over blocks 64-byte blocks of 16
// messages at once, message l starting at base+offsets[l] and advancing
// 64 bytes a block; state[w][l] is word w of message l's state, taken and
// updated. No padding: the caller gives it whole blocks.
//
//go:generate go run gen_sha256x16.go
//go:noescape
func sha256x16(state *[8][lanes]uint32, base *byte, offsets *[lanes]uint32, blocks int)
