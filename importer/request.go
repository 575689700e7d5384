package importer

import (
	"log/slog"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/qemu"
)

// Content types (TargetOptions.ContentType, CDI's IMPORTER_CONTENTTYPE).
const (
	ContentTypeKubevirt = "kubevirt"
	ContentTypeArchive  = "archive"
	// ContentTypeAsIs copies the source's bytes onto the target as they
	// are: no compression is peeled and no format is sniffed (a block
	// volume's clone, whose first bytes may look like anything). The
	// stream route's staging and Commit apply as to a raw image.
	ContentTypeAsIs = "as-is"
)

// formatInRaw is the one source format that can be forced (TargetOptions.FormatIn).
const formatInRaw = "raw"

// request is one import as newRequest resolved it from its Options: the
// source built, the checksums parsed, the options checked.
type request struct {
	Source datasource.Source
	Target string
	// Blank asks for an empty disk on Target and no import: Source is
	// nil, and Size, FilesystemOverhead, Format and Preallocation describe
	// the disk (routeBlank).
	Blank     bool
	Checksums []iostage.Checksum
	// TargetOptions are the caller's, as Options has them: ScratchDir ""
	// is os.TempDir() unless NoScratch; ExpectContentDigest is
	// "blk-sha256:hex" or "" (newRequest normalizes it); NoStreamDecode is
	// also set by the restart loop when the decoder found a layout it
	// cannot stream.
	TargetOptions
	// StreamDecodeMaxBuffered bounds what the stream decoder holds for
	// clusters that arrive before their table (0: its default); tests set
	// it small.
	StreamDecodeMaxBuffered int64
	// Delta asks for a delta pass (routeDelta) where the target already
	// holds a copy; DeltaBase, when set, is the content digest it must
	// have. The restart loop clears Delta when the target was no base.
	Delta     bool
	DeltaBase string
	// DeltaReceived, when set, is a delta pass received over the wire (the
	// upload server's session feeds it): the import takes routeDelta onto
	// its target, the source is not read, and a target that is no base
	// fails the import (the sender then clones in full).
	DeltaReceived *delta.ReceivedPass
	// deltaSigned, when set, is given the signature of DeltaReceived's
	// target once Info signed it (ReceivedDelta.Signed).
	deltaSigned func(*DeltaSignature)

	Progress func(Progress)
	Events   func(Event)
	Logger   *slog.Logger
	Qemu     *qemu.Runner
	// Wrap decorates the step of a phase (tests inject faults with it).
	Wrap func(Phase, phaseStep) phaseStep
}
