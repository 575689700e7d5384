package iostage

import "golang.org/x/sys/cpu"

// haveZero512 says whether this CPU has AVX-512 (AVX512F) for
// zeroBlocks512.
var haveZero512 = cpu.X86.HasAVX512F

// zeroBlocks512 reports whether the blocks 256-byte blocks at p hold only
// zeros.
//
//go:noescape
func zeroBlocks512(p *byte, blocks int) bool
