package engine

import (
	"github.com/diskimport/engine/internal/delta"
	"log/slog"
	"os"
	"time"

	"github.com/diskimport/engine/datasource"
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
// The field meanings are importer.Options'.
type Request struct {
	Source             datasource.Source
	Target             string
	ContentType        string
	Size               int64
	FilesystemOverhead float64
	Format             string
	ScratchDir         string // "" = os.TempDir(), unless NoScratch
	NoScratch          bool   // no scratch space at all (ScratchDir is empty)
	Checksums          []iostage.Checksum
	// ExpectContentDigest is the content digest the image must have
	// ("blk-sha256:hex", checked by the facade); "" checks nothing.
	ExpectContentDigest string
	Preallocation       bool
	CacheMode           string
	ExactSize           bool
	// AllowSparseOvercommit: see volume.Options.AllowSparseOvercommit.
	AllowSparseOvercommit bool
	Verify                bool
	ZeroTarget            bool
	NoRangedRead          bool
	// FormatIn "raw" takes the source, once decompressed, as a raw disk
	// whatever its bytes look like; "" detects the format.
	FormatIn string
	// NoStreamDecode keeps a streamed qcow2 or streamOptimized vmdk on the
	// scratch route instead of decoding it straight onto the target. The
	// restart loop sets it when the decoder found a layout it cannot stream.
	NoStreamDecode bool
	// StreamDecodeMaxBuffered bounds what the stream decoder holds for
	// clusters that arrive before their table (0: its default); tests set
	// it small.
	StreamDecodeMaxBuffered int64
	// StreamDecodeMaxSpill caps the stream decoder's spill file (0: only
	// the image's virtual size bounds it).
	StreamDecodeMaxSpill int64
	Mode                 os.FileMode

	Progress func(Progress)
	Events   func(Event)
	Logger   *slog.Logger
	Qemu     *qemu.Runner
	// Wrap decorates the step of a phase (tests inject faults with it).
	Wrap func(Phase, Step) Step
}

// BlankRequest is one blank disk; the field meanings are
// importer.BlankOptions' (which converts to it).
type BlankRequest struct {
	Target             string
	Size               int64
	FilesystemOverhead float64
	Format             string
	Preallocation      bool
	Logger             *slog.Logger
	Qemu               *qemu.Runner
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
