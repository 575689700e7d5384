package volume

import "github.com/diskimport/engine/internal/buffers"

const (
	// chunkSize is the unit the reader fills and the writer submits: large
	// enough to amortise syscalls, small enough that a pool of a few stays
	// cheap (perf-limits §4.4: 4 MiB, pool of 4-6).
	chunkSize = 4 << 20
	// poolSize buffers circulate between ReadFrom's read-ahead and the
	// writer.
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

// alignedBuf is an n-byte buffer at the alignment of every buffer of this package.
func alignedBuf(n int) []byte { return buffers.Aligned(n, alignment) }
