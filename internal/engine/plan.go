package engine

import "github.com/diskimport/engine/internal/format"

// Route is the way the bytes take from the source to the target, decided
// once by Info from the headers.
type Route int

const (
	// RouteStream: raw bytes straight onto the target, in one pass.
	RouteStream Route = iota + 1
	// RouteScratch: the decompressed image goes to a scratch file, which
	// qemu-img then converts onto the target.
	RouteScratch
	// RouteInPlace: qemu-img converts a local, uncompressed image where it
	// lies.
	RouteInPlace
	// RouteRanged: qemu-img converts an HTTP object read with byte ranges,
	// served to it through our own NBD export.
	RouteRanged
	// RouteArchive: a tar stream extracted into a directory.
	RouteArchive
	// RouteBlank: no source; an empty disk of the requested size.
	RouteBlank
	// RouteStreamDecode: an image streamdecode.Supports (a qcow2, a
	// streamOptimized vmdk, a dynamic vhd, a vdi, a vhdx) decoded by our
	// own decoder straight onto a raw target, in one pass and without a
	// scratch file. A layout the decoder cannot stream restarts the import
	// with Request.NoStreamDecode: over ranges where the server serves
	// them, else through scratch.
	RouteStreamDecode
	// RouteDelta: a delta pass (Request.Delta) onto a target that already
	// holds a copy of the source's size, written in place: only the 64
	// KiB blocks whose hashes differ (internal/delta). A target found
	// not to be the base named restarts the import without Delta.
	RouteDelta
)

func (r Route) String() string {
	switch r {
	case RouteStream:
		return "stream"
	case RouteScratch:
		return "scratch"
	case RouteInPlace:
		return "in-place"
	case RouteRanged:
		return "ranged"
	case RouteArchive:
		return "archive"
	case RouteBlank:
		return "blank"
	case RouteStreamDecode:
		return "stream-decode"
	case RouteDelta:
		return "delta"
	}
	return "unknown"
}

// Converts says whether qemu-img writes the target on this route.
func (r Route) Converts() bool {
	return r == RouteScratch || r == RouteInPlace || r == RouteRanged
}

// VerifyMethod is how Verify compares source and target.
type VerifyMethod string

const (
	// VerifyDigests: sha256 of both sides (a raw copy).
	VerifyDigests VerifyMethod = "sha256"
	// VerifyCompare: qemu-img compare (a converted image).
	VerifyCompare VerifyMethod = "qemu-img compare"
	// VerifyBlockHashes: the content digest of the target's block hashes
	// after a delta pass against the source's.
	VerifyBlockHashes VerifyMethod = "block hashes"
)

// Plan is what Info decided about one import. It is not changed once
// returned: phases read it, they do not steer by it.
type Plan struct {
	Route Route
	// SourceFormat is the detected image format and Compressions the
	// layers peeled off it, outermost first.
	SourceFormat format.Format
	Compressions []format.Compression
	// ConvertFormat is the format qemu-img reads on a converting route.
	ConvertFormat format.Format
	// OutputFormat is what the target holds: "raw" or "qcow2".
	OutputFormat string
	// Verify is how Verify compares, or "" when the import is not verified.
	Verify VerifyMethod
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

// PhasesFor returns the phases a route runs after Info and the phase after
// which its source is drained.
func PhasesFor(r Route, verify bool) (phases []Phase, drainedAfter Phase) {
	switch r {
	case RouteStream, RouteStreamDecode:
		phases, drainedAfter = []Phase{TransferDataFile, Resize}, TransferDataFile
	case RouteScratch:
		phases, drainedAfter = []Phase{TransferScratch, Validate, Convert, Resize}, Validate
	case RouteInPlace:
		phases, drainedAfter = []Phase{Validate, Convert, Resize}, Validate
	case RouteRanged:
		// qemu-img reads the object over HTTP until Convert ends.
		phases, drainedAfter = []Phase{Validate, Convert, Resize}, Convert
	case RouteArchive:
		return []Phase{TransferDataDir, Commit, Complete}, TransferDataDir
	case RouteBlank:
		return []Phase{Resize, Commit, Complete}, ""
	case RouteDelta:
		// Verify waits for the source's second reading (delta.Recheck).
		return []Phase{TransferDelta, Verify, Commit, Complete}, Verify
	}
	if verify {
		phases = append(phases, Verify)
	}
	return append(phases, Commit, Complete), drainedAfter
}
