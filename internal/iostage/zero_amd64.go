package iostage

import "golang.org/x/sys/cpu"

// haveZero512 says whether this CPU has AVX-512 (AVX512F) for
// zeroBlocks512; haveZero256 whether it has AVX2 for zeroBlocks256.
var (
	haveZero512 = cpu.X86.HasAVX512F
	haveZero256 = cpu.X86.HasAVX2
)

// zeroBlocks512 reports whether the blocks 256-byte blocks at p hold only
// zeros.
//
//go:noescape
func zeroBlocks512(p *byte, blocks int) bool

// zeroBlocks256 is zeroBlocks512 in AVX2.
//
//go:noescape
func zeroBlocks256(p *byte, blocks int) bool
