package blkhash

import "golang.org/x/sys/cpu"

// havePairs says whether this CPU has the SHA extensions (and SSE4.1 for
// PBLENDW) that sha256x2 uses; x/sys/cpu does not report SHA on x86.
var havePairs = cpuidSHA() && cpu.X86.HasSSE41

// cpuidSHA reads the SHA extensions' CPUID bit.
func cpuidSHA() bool

// sha256x2 runs SHA-256's compression over blocks 64-byte blocks of two
// messages at once, p0 and p1, each advancing 64 bytes a block; state[l]
// is message l's words a-h, taken and updated. No padding: the caller
// gives it whole blocks.
//
//go:noescape
func sha256x2(state *[2][8]uint32, p0, p1 *byte, blocks int)
