package importer

import (
	"errors"
	"fmt"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/streamdecode"
)

// Choosing between the ranged route and the stream decoder for an HTTP
// image both can take (onto a raw target, no checksum, no Verify, a server
// that serves ranges: rangedClosed and streamDecodeClosed both say ""). The
// rules, each with the bench/routes.sh measurement that chose it (medians
// of interleaved runs on 2 loaded cores; bench/RESULTS.md has the tables):
//
//   - A qcow2 whose clusters follow their tables is decoded onto either
//     target, plain clusters or compressed: one GET into the decoder beats
//     qemu-img reading our NBD export (2 GiB disk, 35 % data, onto a loop
//     device: 0.98 s decoded, 1.30 s ranged; the 1 GiB disk with every
//     cluster compressed, 5 runs: onto a loop device 1.34 s decoded,
//     1.76 s ranged, onto a file 1.30 s and 1.85 s).
//   - A vhdx, a dynamic vhd and a vdi are decoded: their tables come first
//     and the decoder writes whole blocks (a vdi onto a loop device: 1.39 s
//     decoded, 2.38 s ranged; the decoder won 11 of 12 paired runs).
//   - Ranged where it reads much less than a stream would (a file at least
//     rangedWins times what its tables reference: discarded clusters of a
//     used image, a file cut from a larger object), and where the decoder
//     would hold more than streamdecode.Options.MaxBuffered of clusters
//     that come before their tables: it would spill them to scratch, or
//     abort and start over (importWithRestarts), while ranged needs
//     neither.
//
// The facts come from the L1 and L2 tables, which Info reads over ranges
// before choosing (importFacts, format.ReadQCOW2Layout): one small request
// for the L1 and one per L2 table, a few in flight (5 ms for the bench image); they are 1/8192 of
// the virtual size at 64 KiB clusters. Tables beyond maxLayoutTableBytes,
// or that cannot be read, mean ranged (whose structural check names what
// is wrong before qemu-img runs).

// maxLayoutTableBytes bounds the tables read before the route is chosen:
// 16 MiB of L2 tables cover 1 TiB of a fully allocated disk at 64 KiB
// clusters.
const maxLayoutTableBytes = 16 << 20

// rangedWins: the stream must carry this many times the bytes the ranged
// route reads before ranged is the faster route.
const rangedWins = 2

// decide is the plan for an import with these facts and this request,
// and the reason for its route in words: no I/O, no logging (Info logs the
// one line). The route table is ARCHITECTURE.md's, in this order: a delta
// pass where one was asked for and the facts allow it (deltaClosed; the
// reason of any other route then says why not); a raw image onto a raw
// target is streamed; an image the ranged route takes goes over ranges
// unless the stream decoder takes it too and is predicted faster
// (preferRanged); a local uncompressed image is converted in place; an
// image the stream decoder takes is decoded; the rest goes through a
// scratch copy.
func decide(f *importFacts, req request) (*importPlan, string) {
	if f.deltaReceived {
		return deltaPlan(f), "a delta pass received over the wire: the runs the sender found different are written in place"
	}
	if !req.Delta {
		return decideRoute(f, req)
	}
	noDelta := deltaClosed(f, req)
	if noDelta != "" {
		plan, why := decideRoute(f, req)
		return plan, why + "; no delta pass: " + noDelta
	}
	return deltaPlan(f), "a delta pass: the target holds a copy of the source's size; only the blocks that differ are written, in place"
}

// deltaPlan is routeDelta's plan.
func deltaPlan(f *importFacts) *importPlan {
	plan := &importPlan{Route: routeDelta, SourceFormat: f.format, OutputFormat: "raw", Verify: verifyBlockHashes, Clone: true}
	plan.Phases, plan.SourceDrainedAfter = phasesFor(routeDelta, true)
	return plan
}

// deltaClosed is why a delta pass may not take this import, "" when it
// may. It copies raw bytes from a local file or device (a compressed or
// converted image is written in full, as without Delta) onto a target
// that exists and holds raw bytes of the source's size, or is a block
// device larger than it (unless ExactSize; deltaFit) (no archive, no
// qcow2, no growing to a requested size). Whether the target is the base
// named only its signature tells: the pass restarts the import without
// Delta when it is not (routeClosedError).
func deltaClosed(f *importFacts, req request) string {
	switch {
	case req.ContentType == ContentTypeArchive:
		return "an archive is extracted, not passed in place"
	case outputFormat(req) != "raw":
		return "the target is a qcow2, which qemu-img writes"
	case req.Size > 0:
		return "a requested size grows the target past the source's"
	case f.caps.LocalPath == "":
		return "the source is not a local file or device"
	case len(f.compressions) > 0:
		return fmt.Sprintf("the source is compressed (%v)", f.compressions)
	case f.format.NeedsConversion():
		return fmt.Sprintf("the source is a %s image, which is converted", f.format)
	case !f.deltaTarget.Exists:
		return "the target does not exist yet"
	case !f.deltaTarget.Volume:
		return "the target is neither a regular file nor a block device"
	case !f.deltaTarget.Takes(f.sourceSize, deltaFit(req.ExactSize)):
		return fmt.Sprintf("the target has %d bytes, the source %d", f.deltaTarget.Size, f.sourceSize)
	}
	return ""
}

// decideRoute is decide's plan for an import that is no delta pass.
func decideRoute(f *importFacts, req request) (*importPlan, string) {
	switch {
	case f.blank:
		plan := &importPlan{Route: routeBlank, OutputFormat: outputFormat(req)}
		plan.Phases, plan.SourceDrainedAfter = phasesFor(routeBlank, false)
		return plan, "no source: an empty disk of the requested size"
	case req.ContentType == ContentTypeArchive:
		plan := &importPlan{Route: routeArchive, SourceFormat: f.format, Compressions: f.compressions}
		plan.Phases, plan.SourceDrainedAfter = phasesFor(routeArchive, false)
		return plan, "content type archive: a tar stream extracted into the target directory"
	}
	out := outputFormat(req)
	plan := &importPlan{
		SourceFormat:  f.format,
		Compressions:  f.compressions,
		OutputFormat:  out,
		ConvertFormat: f.format,
		Clone:         f.caps.LocalPath != "",
		TargetZeroed:  f.targetZeroed,
	}
	var why string
	plan.Route, why = chooseRoute(f, req)
	if plan.Route == routeScratch && !f.format.NeedsConversion() {
		plan.ConvertFormat = format.Raw
	}
	if req.Verify {
		plan.Verify = verifyCompare
		if plan.Route == routeStream {
			plan.Verify = verifyDigests
		}
	}
	plan.Phases, plan.SourceDrainedAfter = phasesFor(plan.Route, req.Verify)
	return plan, why
}

// outputFormat is what the target holds: "qcow2" when asked, else "raw".
func outputFormat(req request) string {
	if req.Format == "qcow2" {
		return "qcow2"
	}
	return "raw"
}

// chooseRoute is decide's route and its reason.
func chooseRoute(f *importFacts, req request) (routeKind, string) {
	noDecode := streamDecodeClosed(f, req)
	noRanges := rangedClosed(f, req)
	if noRanges == "" {
		switch {
		case !f.rangesProbed:
			noRanges = "byte ranges were not probed"
		case f.rangeReadErr != nil:
			noRanges = "the server advertises byte ranges but a range read failed: " + f.rangeReadErr.Error()
		}
	}
	switch {
	case !f.format.NeedsConversion() && outputFormat(req) == "raw":
		return routeStream, fmt.Sprintf("a %s image onto a raw target is copied as it arrives", f.format)
	case f.qemuMissing != "" && noDecode == "":
		// Every other route runs qemu-img.
		return routeStreamDecode, fmt.Sprintf("the %s is decoded straight onto the target by the stream decoder: qemu-img cannot run (%s)", f.format, f.qemuMissing)
	case noRanges == "" && noDecode == "":
		// Both routes need no scratch: the faster one is chosen by the
		// format and a qcow2's tables.
		ranged, why := preferRanged(f, req)
		if !ranged {
			return routeStreamDecode, "decoded straight onto the target: the server serves byte ranges, but the stream decoder is faster here: " + why
		}
		return routeRanged, "the server serves byte ranges and qemu-img reading them is faster than the stream decoder here: " + why
	case noRanges == "":
		return routeRanged, "the server serves byte ranges: qemu-img reads the image in place, no scratch copy (not stream-decoded: " + noDecode + ")"
	case f.caps.LocalPath != "" && len(f.compressions) == 0:
		return routeInPlace, "a local uncompressed image: qemu-img reads it in place, no copy"
	case noDecode == "":
		return routeStreamDecode, fmt.Sprintf("the %s is decoded straight onto the target by the stream decoder, no scratch copy (not over ranges: %s)", f.format, noRanges)
	}
	return routeScratch, fmt.Sprintf("qemu-img converts a scratch copy (not stream-decoded: %s; not over ranges: %s)", noDecode, noRanges)
}

// streamDecodeClosed is why the stream decoder may not take this import,
// "" when it may. It needs a raw target, a format it follows in one pass,
// and no read-back verification (qemu-img compare needs a copy of the
// source to read at random). A one-time stream (stdin, an upload) takes it
// too: clusters that arrive before their tables go to a spill file in the
// scratch directory, so nothing has to be read again; only without a
// usable scratch directory can such a layout fail, and then it fails with
// ErrScratchSpaceRequired (overflowError). A qcow2's internal snapshots are
// skipped, their table checked as it passes.
func streamDecodeClosed(f *importFacts, req request) string {
	switch {
	case req.NoStreamDecode:
		return "the stream decoder is off for this attempt"
	case outputFormat(req) != "raw":
		return "the target is a qcow2, which qemu-img writes"
	case req.Verify:
		return "Verify compares with qemu-img, which reads the source at random"
	case !streamdecode.Supports(&format.Image{Format: f.format, Header: f.header}):
		return fmt.Sprintf("it does not read a %s", describeFormat(f))
	}
	return ""
}

// rangedClosed is why qemu-img may not read this import over byte ranges
// (before any range read was tried), "" when it may. The ranged route
// skips a full write and read of the image, and qemu-img fetches only
// allocated clusters. It needs an uncompressed convertible image on a
// server that serves ranges, and no checksum: a digest must see every byte
// in order. A server may advertise "Accept-Ranges: bytes" and still answer
// a range with the whole object (200), so Info tries one range read before
// the route is open (datasource.RangedURL.Probe).
func rangedClosed(f *importFacts, req request) string {
	switch {
	case f.caps.Ranges == nil:
		return "the source is not read over byte ranges"
	case req.NoRangedRead:
		return "ranged reads are turned off"
	case f.checksummed:
		return "a checksum must see every byte in order"
	case len(f.compressions) != 0:
		return "the image is compressed"
	case !f.format.NeedsConversion():
		return fmt.Sprintf("a %s image is not converted", f.format)
	case format.IsStreamOptimizedVMDK(f.format, f.header):
		return "a streamOptimized vmdk is read one grain per range request (measured slower than scratch)"
	}
	return ""
}

// describeFormat names the format with the subtype that decides whether
// the stream decoder reads it, and the compressions around it.
func describeFormat(f *importFacts) string {
	name := format.Describe(f.format, f.header)
	if len(f.compressions) > 0 {
		name = fmt.Sprintf("%s in %v", name, f.compressions)
	}
	return name
}

// preferRanged says whether an image both the ranged route and the stream
// decoder take goes over ranges, and why.
func preferRanged(f *importFacts, req request) (bool, string) {
	switch f.format {
	case format.VHDX, format.VHD, format.VDI:
		return false, "its decoder writes whole blocks, faster onto files and devices (measured)"
	case format.QCOW2:
	default:
		// A streamOptimized vmdk never takes ranges (rangedClosed).
		return true, "format not measured against the stream decoder"
	}
	switch {
	case errors.Is(f.layoutErr, errdefs.ErrTablesTooLarge):
		return true, "tables too large to read up front; ranges never need a restart"
	case f.layoutErr != nil:
		// Its structural check names what is wrong before qemu-img runs;
		// a read failure would hit either route.
		return true, f.layoutErr.Error()
	case f.layout == nil:
		return true, "the qcow2 tables were not read"
	}
	maxHeld := req.StreamDecodeMaxBuffered
	if maxHeld <= 0 {
		maxHeld = streamdecode.DefaultMaxBuffered
	}
	return rangedBetter(*f.layout, f.fileSize, maxHeld)
}

// rangedBetter is the rule on a qcow2 of size bytes with layout lay, for a
// decoder that may hold maxHeld bytes.
func rangedBetter(lay format.QCOW2Layout, size, maxHeld int64) (bool, string) {
	switch {
	case lay.Early > maxHeld:
		return true, "data lies before the tables that map it: a stream decoder would have to hold too much of it"
	case size > rangedWins*lay.Referenced:
		return true, "the file is mostly bytes the image does not reference; ranges read only the rest"
	}
	return false, "clusters after their tables, in a file of about what they reference: one GET into the decoder (measured)"
}
