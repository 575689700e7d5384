package qemu

import "time"

// Limits are the resource caps applied to a qemu-img run. The sandbox
// launcher sets them before it execs qemu-img, so they hold from its first
// instruction.
// A zero field means "use the default for this subcommand".
type Limits struct {
	AddressSpace uint64 // RLIMIT_AS in bytes
	CPUSeconds   uint64 // RLIMIT_CPU in seconds (user+system, all threads)
}

const (
	mib = 1 << 20
	gib = 1 << 30
)

// Default limits. Measured on qemu-img 7.2 (2 cores, MALLOC_ARENA_MAX=2):
// info needs under 64 MiB of address space; convert of 1 GiB qcow2,
// compressed qcow2, streamOptimized vmdk and vhdx needs 135-215 MiB (thread
// stacks for the I/O thread pool and coroutines dominate). The caps leave
// about 10x headroom for large images (bigger L1/L2 caches, more worker
// threads) while still stopping an image that makes qemu-img allocate
// gigabytes from a few header bytes.
//
// CPU: info and check read only metadata (4 ms for a 2 GiB image), so 30 s
// is only reached by a pathological image. Convert is bounded by the data
// size; the slowest measured case, streamOptimized vmdk, decodes at about
// 580 MB/s of virtual size per core, i.e. roughly 30 CPU minutes per TiB, so
// six CPU hours covers multi-TiB images and still ends a runaway loop.
var (
	defaultInfoLimits    = Limits{AddressSpace: 1 * gib, CPUSeconds: 30}
	defaultConvertLimits = Limits{AddressSpace: 2 * gib, CPUSeconds: 6 * 60 * 60}
	// resize and create only touch metadata (or fallocate), but
	// preallocation=full writes zeros through qemu-img, so allow time for it.
	defaultMetaLimits = Limits{AddressSpace: 1 * gib, CPUSeconds: 60 * 60}
)

// DefaultInfoTimeout is the wall-clock limit for info and check.
const DefaultInfoTimeout = 30 * time.Second

// merge fills the zero fields of l from def.
func (l Limits) merge(def Limits) Limits {
	if l.AddressSpace == 0 {
		l.AddressSpace = def.AddressSpace
	}
	if l.CPUSeconds == 0 {
		l.CPUSeconds = def.CPUSeconds
	}
	return l
}
