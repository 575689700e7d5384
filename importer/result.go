package importer

import (
	"time"
)

// Result describes a finished import. On failure Import returns a Result
// too, filled as far as the import got, with Complete false.
type Result struct {
	Complete bool
	Target   string
	// SourceFormat is the detected image format (raw, iso, qcow2, vmdk, vhd,
	// vhdx, vdi) and Compressions the wrappers peeled off, outermost first.
	SourceFormat string
	Compressions []string
	// VirtualSize is the image's own size, the guest-visible disk it
	// holds; TargetSize is the size of what it was written into: a file
	// target after Size grew it, a device's size, a qcow2 target's virtual
	// size after resizing.
	VirtualSize int64
	TargetSize  int64
	// BytesWritten is the logical size of the image written to the target.
	BytesWritten int64
	// DataBytes counts the bytes a streamed image actually wrote: zero runs
	// that became holes or device zero-outs are not in it (0 when qemu-img
	// wrote the target).
	DataBytes int64
	// BytesRead counts the bytes received from the source.
	BytesRead            int64
	Checksums            []string
	PreallocationApplied bool
	// ScratchUsed: the import wrote to the scratch directory, and
	// ScratchBytes how much: the decompressed image on the scratch route,
	// or what the stream decoder spilled there of clusters that arrived
	// before their tables.
	ScratchUsed  bool
	ScratchBytes int64
	Phases       []Phase
	Duration     time.Duration
	Labels       map[string]string
	// Retries counts requests re-sent after a failure (resumes, reconnects,
	// retried statuses), restarts from the beginning included.
	Retries int
	// Sandbox names the confinement qemu-img runs under: "landlock vN"
	// (confined to the image and the target) or "rlimits only" (a kernel
	// without Landlock); empty when the route ran no qemu-img.
	Sandbox string

	// Verification (Options.Verify): Verified is true once the target read
	// back matched the source; VerifyMethod is "sha256" (digests of both
	// sides) or "qemu-img compare" (a converted image: SourceDigest is then
	// empty, TargetDigest is set for raw targets). Digests are "sha256:hex"
	// of the first BytesWritten bytes. A delta pass is always verified:
	// "block hashes", the content digest of the target's block hashes
	// after the pass against the source's (both digests are that one).
	Verified     bool
	VerifyMethod string
	SourceDigest string
	TargetDigest string

	// ContentDigest is the digest of the guest-visible disk written (its
	// VirtualSize bytes, before any resize): "blk-sha256:" and the hex
	// digest blksum 0.10.1 prints for the same disk, the same for one
	// disk as raw, qcow2.xz or on a device. `importer digest --content`
	// prints it for any source, and Options.ExpectContentDigest checks it.
	// Empty for archives and qcow2 file targets, and when a converter's
	// writes could not be placed (logged; an expected digest then fails).
	ContentDigest string

	// Delta reports a delta pass (Options.Delta, a clone-source --delta
	// received): the blocks changed and sent, and whether the pass was
	// final. Nil for a full import or clone, a delta's fallback included.
	Delta *DeltaPass

	// TargetState says what a failed import left of its target (empty on
	// success): TargetUntouched, TargetRemoved, TargetWiped or
	// TargetPartial.
	TargetState string
}

// What a failed import left of its target (Result.TargetState).
const (
	// TargetUntouched: nothing was written: a device is as it was, no
	// file or directory entry was made at the target's path.
	TargetUntouched = "untouched"
	// TargetRemoved: a partial file (or an archive's partly extracted
	// files) was written beside the target's path and removed: the path
	// is as it was.
	TargetRemoved = "removed"
	// TargetWiped: a block device was written; its first MiB (and a
	// backup GPT at its end) was zeroed, so it holds no usable image.
	TargetWiped = "wiped"
	// TargetPartial: a delta pass wrote part of the target in place, its
	// first and last MiB zeroed: it holds no usable image, and is no base
	// for another pass (a full clone makes it whole).
	TargetPartial = "partial"
)
