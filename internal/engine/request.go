package engine

import (
	"log/slog"
	"os"
	"time"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/qemu"
)

// Content types (Request.ContentType).
const (
	ContentTypeKubevirt = "kubevirt"
	ContentTypeArchive  = "archive"
	// ContentTypeAsIs copies the source's bytes onto the target as they
	// are: no compression is peeled and no format is sniffed (a block
	// volume's clone, whose first bytes may look like anything). The
	// stream route's staging and Commit apply as to a raw image.
	ContentTypeAsIs = "as-is"
)

// FormatInRaw is the one source format that can be forced (Request.FormatIn).
const FormatInRaw = "raw"

// Request is one import as the facade (package importer) resolved it from
// its Options: the source built, the checksums parsed, the options checked.
type Request struct {
	Source datasource.Source
	Target string
	// Blank asks for an empty disk on Target and no import: Source is
	// nil, and Size, FilesystemOverhead, Format and Preallocation describe
	// the disk (RouteBlank).
	Blank     bool
	Checksums []iostage.Checksum
	// Settings are importer.TargetOptions, converted as they are.
	Settings
	// StreamDecodeMaxBuffered bounds what the stream decoder holds for
	// clusters that arrive before their table (0: its default); tests set
	// it small.
	StreamDecodeMaxBuffered int64
	// Delta asks for a delta pass (RouteDelta) where the target already
	// holds a copy; DeltaBase, when set, is the content digest it must
	// have. The restart loop clears Delta when the target was no base.
	Delta     bool
	DeltaBase string
	// DeltaReceived, when set, is a delta pass received over the wire (the
	// upload server's session feeds it): the import takes RouteDelta onto
	// its target, the source is not read, and a target that is no base
	// fails the import (the sender then clones in full).
	DeltaReceived *delta.ReceivedPass

	Progress func(Progress)
	Events   func(Event)
	Logger   *slog.Logger
	Qemu     *qemu.Runner
	// Wrap decorates the step of a phase (tests inject faults with it).
	Wrap func(Phase, Step) Step
}

// Settings is importer.TargetOptions, field for field (the facade
// converts it; the documentation is there). ScratchDir "" is os.TempDir()
// unless NoScratch; ExpectContentDigest is "blk-sha256:hex" or "" (the
// facade normalizes it); NoStreamDecode is also set by the restart loop
// when the decoder found a layout it cannot stream.
type Settings struct {
	ContentType           string
	Size                  int64
	FilesystemOverhead    float64
	Mode                  os.FileMode
	Format                string
	FormatIn              string
	ScratchDir            string
	NoScratch             bool
	Preallocation         bool
	CacheMode             string
	AllowSparseOvercommit bool
	ExactSize             bool
	Verify                bool
	ExpectContentDigest   string
	ZeroTarget            bool
	NoRangedRead          bool
	NoStreamDecode        bool
	MaxSpill              int64
}

// Result is importer.Result, field for field (the facade converts it; the
// documentation is there).
type Result struct {
	Complete             bool
	Target               string
	SourceFormat         string
	Compressions         []string
	VirtualSize          int64
	TargetSize           int64
	BytesWritten         int64
	DataBytes            int64
	BytesRead            int64
	Checksums            []string
	PreallocationApplied bool
	ScratchUsed          bool
	ScratchBytes         int64
	Phases               []Phase
	Duration             time.Duration
	Labels               map[string]string
	Retries              int
	Sandbox              string
	Verified             bool
	VerifyMethod         string
	SourceDigest         string
	TargetDigest         string
	ContentDigest        string
	Delta                *delta.Pass
	TargetState          string
}

// Progress is importer.Progress, field for field.
type Progress struct {
	Phase        Phase
	BytesRead    int64
	SourceSize   int64
	BytesWritten int64
	Percent      float64
	PhasePercent float64
}
