package importer

import (
	"context"
	"fmt"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/iostage"
)

// importFacts is everything the route choice reads about one import. Info
// gathers it once (sourceFacts: the source opened, its header sniffed, its
// capabilities taken, and for a delta pass the target as it lies; then
// gatherFacts: where the choice depends on them a range probe and a
// qcow2's tables read); decide reads nothing else, so it does no I/O.
type importFacts struct {
	// The image as identified: its format, the layers peeled off it
	// (outermost first) and its header.
	format       format.Format
	compressions []format.Compression
	header       format.Header
	// caps is what the transfer's bytes allow, as its source declared.
	caps datasource.Capabilities
	// checksummed: checksums are verified over the bytes as received.
	checksummed bool
	// targetZeroed: Info zeroed the whole block target (request.ZeroTarget).
	targetZeroed bool
	// blank: no source at all (request.Blank).
	blank bool
	// sourceSize is the source's size in bytes (-1: not known before it
	// is read); deltaTarget the target as it lies, read only where
	// request.Delta asks for a pass.
	sourceSize  int64
	deltaTarget delta.TargetState
	// deltaReceived: the import is a delta pass received over the wire
	// (request.DeltaReceived), its target already open and signed.
	deltaReceived bool

	// rangesProbed: one range read was tried, only where nothing else
	// closes the ranged route; rangeReadErr is its failure (nil: the
	// server answers ranges as it advertised).
	rangesProbed bool
	rangeReadErr error
	// layout is a qcow2's tables, read over ranges where both the ranged
	// route and the stream decoder are open (nil otherwise, or when
	// layoutErr says why they could not be read); fileSize is the size of
	// the file they describe.
	layout    *format.QCOW2Layout
	layoutErr error
	fileSize  int64
	// qemuMissing says why qemu-img cannot run ("" when it can), looked up
	// only for an image that needs converting.
	qemuMissing string
}

// sourceFacts is what the opened source and its identified image tell
// the route choice, and, where request.Delta asks for a pass, the state
// of the target as it lies (a stat, nothing opened for writing).
func (a *attempt) sourceFacts() *importFacts {
	img := a.source.image
	f := &importFacts{
		format:       img.Format,
		compressions: img.Compressions,
		header:       img.Header,
		caps:         a.caps,
		checksummed:  a.source.verifier != nil,
		sourceSize:   a.source.size,
	}
	if a.req.Delta {
		f.deltaTarget = delta.StatTarget(delta.TargetPath(a.req.Target))
	}
	if f.format.NeedsConversion() || outputFormat(a.req) != "raw" {
		if err := a.qemu.Installed(); err != nil {
			f.qemuMissing = err.Error()
		}
	}
	return f
}

// gatherFacts completes f once the target is open (whether Info zeroed
// it) with the probes decide will read: a range probe and a qcow2's
// tables, made only where the route depends on them, so a route the
// request closes costs no request.
func (a *attempt) gatherFacts(ctx context.Context, f *importFacts) *importFacts {
	f.targetZeroed = a.targetZeroed
	if a.req.ContentType == ContentTypeArchive || rangedClosed(f, a.req) != "" {
		return f
	}
	f.rangesProbed = true
	if f.rangeReadErr = f.caps.Ranges.Probe(ctx); f.rangeReadErr != nil {
		a.log.Warn("The server advertises byte ranges but a range read failed; reading the image as a stream instead",
			"url", a.req.Source.String(), "cause", f.rangeReadErr.Error())
		return f
	}
	if f.format == format.QCOW2 && streamDecodeClosed(f, a.req) == "" {
		a.readLayout(ctx, f)
	}
	return f
}

// readLayout reads a qcow2's L1 and L2 tables over ranges into f.
func (a *attempt) readLayout(ctx context.Context, f *importFacts) {
	rr, err := f.caps.Ranges.Open(ctx)
	if err != nil {
		f.layoutErr = fmt.Errorf("opening the range reader: %w", err)
		return
	}
	defer rr.Close()
	f.fileSize = rr.Size()
	lay, err := format.ReadQCOW2Layout(ctx, iostage.CountReaderAt(rr, &a.meter.rangedRead), f.header, rr.Size(), maxLayoutTableBytes)
	if err != nil {
		f.layoutErr = fmt.Errorf("reading the qcow2 tables: %w", err)
		return
	}
	f.layout = &lay
	a.log.Debug("qcow2 layout", "fileSize", rr.Size(), "referenced", lay.Referenced, "early", lay.Early,
		"clusters", lay.Clusters, "compressed", lay.Compressed, "l2Tables", lay.L2Tables)
}
