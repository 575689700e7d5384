package importer

import "github.com/diskimport/engine/internal/format"

// routeKind is the way the bytes take from the source to the target, decided
// once by Info from the headers.
type routeKind int

const (
	// routeStream: raw bytes straight onto the target, in one pass.
	routeStream routeKind = iota + 1
	// routeScratch: the decompressed image goes to a scratch file, which
	// qemu-img then converts onto the target.
	routeScratch
	// routeInPlace: qemu-img converts a local, uncompressed image where it
	// lies.
	routeInPlace
	// routeRanged: qemu-img converts an HTTP object read with byte ranges,
	// served to it through our own NBD export.
	routeRanged
	// routeArchive: a tar stream extracted into a directory.
	routeArchive
	// routeBlank: no source; an empty disk of the requested size.
	routeBlank
	// routeStreamDecode: an image streamdecode.Supports (a qcow2, a
	// streamOptimized vmdk, a dynamic vhd, a vdi, a vhdx) decoded by our
	// own decoder straight onto a raw target, in one pass and without a
	// scratch file. A layout the decoder cannot stream restarts the import
	// with request.NoStreamDecode: over ranges where the server serves
	// them, else through scratch.
	routeStreamDecode
	// routeDelta: a delta pass (request.Delta) onto a target that already
	// holds a copy of the source's size, written in place: only the 64
	// KiB blocks whose hashes differ (internal/delta). A target found
	// not to be the base named restarts the import without Delta.
	routeDelta
)

func (r routeKind) String() string {
	switch r {
	case routeStream:
		return "stream"
	case routeScratch:
		return "scratch"
	case routeInPlace:
		return "in-place"
	case routeRanged:
		return "ranged"
	case routeArchive:
		return "archive"
	case routeBlank:
		return "blank"
	case routeStreamDecode:
		return "stream-decode"
	case routeDelta:
		return "delta"
	}
	return "unknown"
}

// Converts says whether qemu-img writes the target on this route.
func (r routeKind) Converts() bool {
	return r == routeScratch || r == routeInPlace || r == routeRanged
}

// verifyMethod is how Verify compares source and target.
type verifyMethod string

const (
	// verifyDigests: sha256 of both sides (a raw copy).
	verifyDigests verifyMethod = "sha256"
	// verifyCompare: qemu-img compare (a converted image).
	verifyCompare verifyMethod = "qemu-img compare"
	// verifyBlockHashes: the content digest of the target's block hashes
	// after a delta pass against the source's.
	verifyBlockHashes verifyMethod = "block hashes"
)

// importPlan is what Info decided about one import. It is not changed once
// returned: phases read it, they do not steer by it.
type importPlan struct {
	Route routeKind
	// SourceFormat is the detected image format and Compressions the
	// layers peeled off it, outermost first.
	SourceFormat format.Format
	Compressions []format.Compression
	// ConvertFormat is the format qemu-img reads on a converting route.
	ConvertFormat format.Format
	// OutputFormat is what the target holds: "raw" or "qcow2".
	OutputFormat string
	// Verify is how Verify compares, or "" when the import is not verified.
	Verify verifyMethod
	// Clone: the source is a local file or device, read in place or a
	// second time (verify); TargetZeroed: the whole block target was
	// zeroed by Info, so zero runs may be skipped.
	Clone        bool
	TargetZeroed bool

	// Phases run after Info, in order; the last is Complete.
	Phases []Phase
	// SourceDrainedAfter is the phase after which the source is wholly
	// received and validated ("" for a blank disk).
	SourceDrainedAfter Phase
}

// phasesFor returns the phases a route runs after Info and the phase after
// which its source is drained.
func phasesFor(r routeKind, verify bool) (phases []Phase, drainedAfter Phase) {
	switch r {
	case routeStream, routeStreamDecode:
		phases, drainedAfter = []Phase{PhaseTransferDataFile, PhaseResize}, PhaseTransferDataFile
	case routeScratch:
		phases, drainedAfter = []Phase{PhaseTransferScratch, PhaseValidate, PhaseConvert, PhaseResize}, PhaseValidate
	case routeInPlace:
		phases, drainedAfter = []Phase{PhaseValidate, PhaseConvert, PhaseResize}, PhaseValidate
	case routeRanged:
		// qemu-img reads the object over HTTP until Convert ends.
		phases, drainedAfter = []Phase{PhaseValidate, PhaseConvert, PhaseResize}, PhaseConvert
	case routeArchive:
		return []Phase{PhaseTransferDataDir, PhaseCommit, PhaseComplete}, PhaseTransferDataDir
	case routeBlank:
		return []Phase{PhaseResize, PhaseCommit, PhaseComplete}, ""
	case routeDelta:
		// Verify waits for the source's second reading (delta.Recheck).
		return []Phase{PhaseTransferDelta, PhaseVerify, PhaseCommit, PhaseComplete}, PhaseVerify
	}
	if verify {
		phases = append(phases, PhaseVerify)
	}
	return append(phases, PhaseCommit, PhaseComplete), drainedAfter
}
