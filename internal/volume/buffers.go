package volume

import "unsafe"

const (
	// chunkSize is the unit the reader fills and the writer submits: large
	// enough to amortise syscalls, small enough that a pool of a few stays
	// cheap (perf-limits §4.4: 4 MiB, pool of 4-6).
	chunkSize = 4 << 20
	// poolSize buffers are shared by the reader goroutine and the writer.
	poolSize = 5
	// granule is the zero-detection unit; zero runs are tracked in granules.
	granule = 64 << 10
	// headSize bytes at the start of the image are held in memory and
	// written last, so a failed import never leaves a bootable-looking disk.
	headSize = 1 << 20
	// alignment of every buffer handed to an O_DIRECT write; covers any
	// logical block size up to 4 KiB.
	alignment = 4096
	// maxZeroRun caps a coalesced zero run so one BLKZEROOUT does not run
	// for seconds without a chance to notice cancellation.
	maxZeroRun = 256 << 20
)

// AlignedBuf returns an n-byte slice whose first byte is aligned to align
// (a power of two), as O_DIRECT needs. It lives on the Go heap; the
// over-allocation is at most align bytes.
func AlignedBuf(n, align int) []byte {
	b := make([]byte, n+align)
	skip := (align - int(uintptr(unsafe.Pointer(&b[0]))&uintptr(align-1))) & (align - 1)
	return b[skip : skip+n : skip+n]
}

// alignedBuf is AlignedBuf at the alignment of every buffer of this package.
func alignedBuf(n int) []byte { return AlignedBuf(n, alignment) }
