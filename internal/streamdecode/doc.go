// Package streamdecode turns a qcow2, streamOptimized vmdk, dynamic VHD,
// VDI or VHDX image arriving as a forward-only stream (the output of
// format.Open: a registry layer, a .qcow2.gz or .vhd.xz over HTTP, an
// upload) into raw guest writes, in one pass and without a scratch copy.
// Supports says which images have a decoder. A VHDX's virtual size is
// known only once its metadata region has passed, after the engine's
// header checks, so Options.TargetSize lets the decoder refuse a disk too
// big for the target before it writes a byte.
//
// The output seam is a Sink (WriteAt at guest offsets). A converted qcow2
// is mostly in guest order, but nothing in the format promises it (an
// image rewritten after a snapshot, or one whose L2 tables were allocated
// late, is not), and a sequential writer would have to hold back every
// cluster that arrives early; random access lets every cluster go out the
// moment it is mapped. Both kinds of target take it: a fresh sparse file
// (*os.File) and volume.DeviceWriter, which also zeroes (ZeroSink).
//
// A Sink without ZeroAt is taken to read zeros where nothing is written
// (a new sparse file, a discarded device): holes and all-zero clusters
// are then not written at all. A ZeroSink is told every guest range that
// must read as zeros.
//
// Bytes that pass before the table mapping them are held, in memory up to
// Options.MaxBuffered and past it in a spill file in Options.SpillDir
// (retention, spill) of at most the image's virtual size and
// Options.MaxSpill; once no table that could claim bytes already passed
// is still to come, nothing more is held. What a decoder remembers of the
// tables (the tables, the clusters, grains, blocks or tables still to be
// accounted for) is charged to Options.MaxBuffered too. Internal snapshots of a qcow2 are not decoded: their table is
// read and checked as qemu-img check would (every entry well formed, the
// table, each snapshot's L1 table and the L2 tables it names inside the
// file), and clusters only they use pass unwritten.
//
// What the decoders do not handle in one pass is refused with
// errdefs.ErrNotStreamable, never guessed at: the caller falls back to
// scratch + qemu-img. Damaged or truncated streams fail with
// errdefs.ErrInvalidImage, the same structural checks as
// format.CheckQCOW2, CheckVMDK, CheckVHD and CheckVDI applied as the bytes
// pass.
package streamdecode

import (
	"runtime"
)

// Sink receives the guest image: raw bytes at guest offsets. Calls come
// from one goroutine at a time, in no particular offset order; p is only
// valid during the call.
type Sink interface {
	WriteAt(p []byte, off int64) (int, error)
}

// ZeroSink is a Sink whose target may hold old data: the decoder reports
// every guest range that must read as zeros.
type ZeroSink interface {
	Sink
	ZeroAt(off, n int64) error
}

// HoleSink is a plain Sink (a new sparse file) that is also told the
// guest ranges left unwritten because they read as zeros: holes, the zero
// ranges of the tables, all-zero clusters and pieces. A content hash beside
// the writes needs them to finish a block written in pieces.
type HoleSink interface {
	Sink
	Hole(off, n int64)
}

// Options tune a decoder. The zero value gives the defaults.
type Options struct {
	// MaxBuffered bounds the bytes held in memory for clusters that
	// arrive before the table mapping them, and what the decoder
	// remembers of the tables (default 64 MiB). Past it the bytes go to a
	// spill file in SpillDir; without SpillDir, or when the tables'
	// bookkeeping alone passes it, the decoder stops with a *BufferError
	// (errdefs.ErrNotStreamable).
	MaxBuffered int64
	// SpillDir is where the spill file is created, on first need only
	// (unlinked at once, so nothing is left whatever way the decode
	// ends). "" means no spilling.
	SpillDir string
	// MaxSpill caps the spill file (0: no cap). Whatever it says, the
	// spill never exceeds what the image can legitimately need held, its
	// virtual size (for a VHDX, whose size comes late, TargetSize when
	// set): past either the decoder stops with a *SpillLimitError
	// (errdefs.ErrNotStreamable).
	MaxSpill int64
	// Workers inflate compressed clusters or grains (default GOMAXPROCS,
	// 2 under a 750m quota too: one measured slower, see cpulimit.Workers).
	Workers int
	// InflateChild is the diskimport-inflate binary that inflates zlib
	// grains and deflate clusters instead of the workers (ISA-L's inflate):
	// "" looks it up on PATH, "-" never uses one (format.Options').
	InflateChild string
	// MaxVirtualSize refuses larger disks (default: format's limit).
	MaxVirtualSize int64
	// TargetSize, when not 0, is the target's capacity: an image whose
	// virtual size is learnt only inside the stream (a VHDX's metadata)
	// and is larger fails with *errdefs.SizeError before anything is
	// written. Sizes in a header are checked by the engine before decoding.
	TargetSize int64
}

// DefaultMaxBuffered is Options.MaxBuffered's default.
const DefaultMaxBuffered = 64 << 20

func (o Options) withDefaults() Options {
	if o.MaxBuffered <= 0 {
		o.MaxBuffered = DefaultMaxBuffered
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	return o
}

// Stats describe one decode.
type Stats struct {
	VirtualSize int64
	// StreamBytes is the length of the image stream read.
	StreamBytes int64
	// DataBytes is the guest data handed to the sink (zeros skipped for a
	// plain Sink not counted).
	DataBytes int64
	// Compressed counts compressed clusters or grains inflated.
	Compressed int64
	// PeakBuffered is the most bytes held at once for clusters that came
	// before their table; BufferedBytes all bytes that were ever held.
	PeakBuffered  int64
	BufferedBytes int64
	// SpilledBytes is all that was written to the spill file and
	// PeakSpilled the most it held at once (bytes claimed or no longer
	// needed are punched out of it).
	SpilledBytes int64
	PeakSpilled  int64
}
