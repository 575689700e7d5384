package importer

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/delta"
	"github.com/diskimport/engine/internal/format"
)

// The phases of ARCHITECTURE.md's route table, written out.
var (
	streamPhases        = []Phase{PhaseTransferDataFile, PhaseResize, PhaseCommit, PhaseComplete}
	streamVerifyPhases  = []Phase{PhaseTransferDataFile, PhaseResize, PhaseVerify, PhaseCommit, PhaseComplete}
	scratchPhases       = []Phase{PhaseTransferScratch, PhaseValidate, PhaseConvert, PhaseResize, PhaseCommit, PhaseComplete}
	scratchVerifyPhases = []Phase{PhaseTransferScratch, PhaseValidate, PhaseConvert, PhaseResize, PhaseVerify, PhaseCommit, PhaseComplete}
	inPlacePhases       = []Phase{PhaseValidate, PhaseConvert, PhaseResize, PhaseCommit, PhaseComplete}
	inPlaceVerifyPhases = []Phase{PhaseValidate, PhaseConvert, PhaseResize, PhaseVerify, PhaseCommit, PhaseComplete}
	rangedPhases        = []Phase{PhaseValidate, PhaseConvert, PhaseResize, PhaseCommit, PhaseComplete}
	archivePhases       = []Phase{PhaseTransferDataDir, PhaseCommit, PhaseComplete}
	blankPhases         = []Phase{PhaseResize, PhaseCommit, PhaseComplete}
	deltaPhases         = []Phase{PhaseTransferDelta, PhaseVerify, PhaseCommit, PhaseComplete}
)

// factsOf is the facts of an image of format f with header h, peeled of
// the compressions c, from a forward-only stream that can be opened again.
func factsOf(f format.Format, h format.Header, c ...format.Compression) *importFacts {
	return &importFacts{format: f, header: h, compressions: c}
}

// local: the bytes are a local file.
func (f *importFacts) local() *importFacts {
	f.caps.LocalPath = "/var/lib/images/disk"
	return f
}

// withoutQemu: qemu-img is not installed.
func (f *importFacts) withoutQemu() *importFacts {
	f.qemuMissing = `"qemu-img" is not installed`
	return f
}

// oneTime: standard input or an upload.
func (f *importFacts) oneTime() *importFacts {
	f.caps.OneTime = true
	return f
}

// served: an HTTP answer whose server serves ranges; probeErr is the range
// probe's failure (nil: ranges work).
func (f *importFacts) served(probeErr error) *importFacts {
	f.caps.HTTPAnswer = true
	f.caps.Ranges = &datasource.RangedURL{URL: "http://127.0.0.1/disk", Size: 1 << 30}
	f.rangesProbed, f.rangeReadErr = true, probeErr
	return f
}

// withLayout: a qcow2's tables as read over ranges, in a file of size bytes.
func (f *importFacts) withLayout(lay format.QCOW2Layout, size int64) *importFacts {
	f.layout, f.fileSize = &lay, size
	return f
}

func (f *importFacts) withLayoutErr(err error) *importFacts {
	f.layoutErr = err
	return f
}

// deltaOnto: a source of size bytes, onto a target that holds a volume
// of targetSize bytes (-1: no target yet).
func (f *importFacts) deltaOnto(size, targetSize int64) *importFacts {
	f.sourceSize = size
	if targetSize >= 0 {
		f.deltaTarget = delta.TargetState{Exists: true, Volume: true, Size: targetSize}
	}
	return f
}

// noVolume: the target path holds something that is neither a file nor
// a block device.
func (f *importFacts) noVolume() *importFacts {
	f.deltaTarget.Volume = false
	return f
}

func (f *importFacts) checksum() *importFacts {
	f.checksummed = true
	return f
}

func (f *importFacts) zeroed() *importFacts {
	f.targetZeroed = true
	return f
}

// Every row of ARCHITECTURE.md's route table, each with the facts and
// request that lead to it, and the qcow2 route-choice predictions: the
// route, its phases, its drain phase, the plan's flags and the reason
// decide gives, from facts alone (no source, no network).
func TestDecideRouteTable(t *testing.T) {
	withDelta := func(s TargetOptions) request { return request{TargetOptions: s, Delta: true} }
	var (
		deltaReq     = withDelta(TargetOptions{})
		raw          = format.Header{}
		qcow2        = format.Header{VirtualSize: 2 << 30}
		streamVMDK   = format.Header{VMDKCreateType: "streamOptimized"}
		sparseVMDK   = format.Header{VMDKCreateType: "monolithicSparse"}
		dynamicVHD   = format.Header{VHDDiskType: 3}
		fixedVHD     = format.Header{VHDDiskType: 2}
		dynamicVDI   = format.Header{VDIImageType: 1}
		staticVDI    = format.Header{VDIImageType: 2}
		vhdx         = format.Header{}
		mib          = int64(1 << 20)
		plainLayout  = format.QCOW2Layout{Referenced: 700 * mib, Clusters: 11000, L2Tables: 2}
		mostlyCompr  = format.QCOW2Layout{Referenced: 390 * mib, Clusters: 11000, Compressed: 9000, L2Tables: 2}
		someCompr    = format.QCOW2Layout{Referenced: 500 * mib, Clusters: 11000, Compressed: 3000, L2Tables: 2}
		earlyLayout  = format.QCOW2Layout{Referenced: 700 * mib, Early: 600 * mib, Clusters: 11000, L2Tables: 2}
		paddedLayout = plainLayout
	)
	for _, c := range []struct {
		name    string
		facts   *importFacts
		req     request
		route   routeKind
		phases  []Phase
		drained Phase
		reason  string // a part of the reason
		check   func(t *testing.T, p *importPlan)
	}{
		// stream (raw onto the target)
		{name: "raw over HTTP", facts: factsOf(format.Raw, raw).served(nil),
			route: routeStream, phases: streamPhases, drained: PhaseTransferDataFile, reason: "raw image onto a raw target"},
		{name: "raw.gz from stdin", facts: factsOf(format.Raw, raw, format.Gzip).oneTime(),
			route: routeStream, phases: streamPhases, drained: PhaseTransferDataFile, reason: "copied as it arrives"},
		{name: "iso file", facts: factsOf(format.ISO, raw).local(),
			route: routeStream, phases: streamPhases, drained: PhaseTransferDataFile, reason: "iso image onto a raw target"},
		{name: "as-is bytes", facts: factsOf(format.Raw, raw).oneTime(), req: request{TargetOptions: TargetOptions{ContentType: ContentTypeAsIs}},
			route: routeStream, phases: streamPhases, drained: PhaseTransferDataFile, reason: "raw image"},
		// clone flags on the stream route
		{name: "raw clone verified, target zeroed", facts: factsOf(format.Raw, raw).local().zeroed(), req: request{TargetOptions: TargetOptions{Verify: true, ZeroTarget: true}},
			route: routeStream, phases: streamVerifyPhases, drained: PhaseTransferDataFile, reason: "raw image",
			check: func(t *testing.T, p *importPlan) {
				assert.True(t, p.Clone)
				assert.True(t, p.TargetZeroed)
				assert.Equal(t, verifyDigests, p.Verify)
			}},

		// stream decode, each format the decoder takes, from a one-time
		// stream (no ranges to weigh against)
		{name: "qcow2 from stdin", facts: factsOf(format.QCOW2, qcow2).oneTime(),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "qcow2 is decoded straight onto the target"},
		{name: "qcow2 with snapshots", facts: factsOf(format.QCOW2, format.Header{VirtualSize: 1 << 30, Snapshots: 2}).oneTime(),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "stream decoder"},
		{name: "qcow2.xz over HTTP", facts: factsOf(format.QCOW2, qcow2, format.XZ).served(nil),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "not over ranges: the image is compressed"},
		{name: "streamOptimized vmdk", facts: factsOf(format.VMDK, streamVMDK).oneTime(),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "vmdk"},
		{name: "dynamic vhd", facts: factsOf(format.VHD, dynamicVHD).oneTime(),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "vhd"},
		{name: "dynamic vdi", facts: factsOf(format.VDI, dynamicVDI).oneTime(),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "vdi"},
		{name: "static vdi", facts: factsOf(format.VDI, staticVDI).oneTime(),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "vdi"},
		{name: "vhdx", facts: factsOf(format.VHDX, vhdx).oneTime(),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "vhdx"},
		{name: "local qcow2.gz", facts: factsOf(format.QCOW2, qcow2, format.Gzip).local(),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "stream decoder"},

		// scratch then convert
		{name: "monolithicSparse vmdk stream", facts: factsOf(format.VMDK, sparseVMDK),
			route: routeScratch, phases: scratchPhases, drained: PhaseValidate, reason: "does not read a monolithicSparse vmdk"},
		{name: "fixed vhd stream", facts: factsOf(format.VHD, fixedVHD),
			route: routeScratch, phases: scratchPhases, drained: PhaseValidate, reason: "does not read a vhd (disk type 2)"},
		{name: "qcow2 onto a qcow2 target", facts: factsOf(format.QCOW2, qcow2).oneTime(), req: request{TargetOptions: TargetOptions{Format: "qcow2"}},
			route: routeScratch, phases: scratchPhases, drained: PhaseValidate, reason: "the target is a qcow2",
			check: func(t *testing.T, p *importPlan) { assert.Equal(t, "qcow2", p.OutputFormat) }},
		{name: "raw.xz onto a qcow2 target", facts: factsOf(format.Raw, raw, format.XZ), req: request{TargetOptions: TargetOptions{Format: "qcow2"}},
			route: routeScratch, phases: scratchPhases, drained: PhaseValidate, reason: "scratch copy",
			check: func(t *testing.T, p *importPlan) { assert.Equal(t, format.Raw, p.ConvertFormat) }},
		{name: "local qcow2.xz verified", facts: factsOf(format.QCOW2, qcow2, format.XZ).local(), req: request{TargetOptions: TargetOptions{Verify: true}},
			route: routeScratch, phases: scratchVerifyPhases, drained: PhaseValidate, reason: "Verify compares with qemu-img",
			check: func(t *testing.T, p *importPlan) { assert.Equal(t, verifyCompare, p.Verify) }},

		// convert in place (local image)
		{name: "local qcow2", facts: factsOf(format.QCOW2, qcow2).local(),
			route: routeInPlace, phases: inPlacePhases, drained: PhaseValidate, reason: "local uncompressed image",
			check: func(t *testing.T, p *importPlan) {
				assert.True(t, p.Clone)
				assert.Equal(t, format.QCOW2, p.ConvertFormat)
			}},
		{name: "local vmdk verified", facts: factsOf(format.VMDK, sparseVMDK).local(), req: request{TargetOptions: TargetOptions{Verify: true}},
			route: routeInPlace, phases: inPlaceVerifyPhases, drained: PhaseValidate, reason: "in place",
			check: func(t *testing.T, p *importPlan) { assert.Equal(t, verifyCompare, p.Verify) }},
		// without qemu-img: the stream decoder takes what it can (a missing
		// qemu-img failed a local qcow2 as an "invalid image")
		{name: "local qcow2 without qemu-img", facts: factsOf(format.QCOW2, qcow2).local().withoutQemu(),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "qemu-img cannot run"},
		{name: "qcow2 over ranges without qemu-img", facts: factsOf(format.QCOW2, qcow2).served(nil).withLayout(plainLayout, 2<<30).withoutQemu(),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "qemu-img cannot run"},
		{name: "local raw onto a qcow2 target", facts: factsOf(format.Raw, raw).local(), req: request{TargetOptions: TargetOptions{Format: "qcow2"}},
			route: routeInPlace, phases: inPlacePhases, drained: PhaseValidate, reason: "in place",
			check: func(t *testing.T, p *importPlan) { assert.Equal(t, format.Raw, p.ConvertFormat) }},

		// convert over ranges (HTTP)
		{name: "fixed vhd over ranges", facts: factsOf(format.VHD, fixedVHD).served(nil),
			route: routeRanged, phases: rangedPhases, drained: PhaseConvert, reason: "not stream-decoded: it does not read a vhd (disk type 2)"},
		{name: "monolithicSparse vmdk over ranges", facts: factsOf(format.VMDK, sparseVMDK).served(nil),
			route: routeRanged, phases: rangedPhases, drained: PhaseConvert, reason: "not stream-decoded: it does not read a monolithicSparse vmdk"},
		{name: "qcow2 over ranges onto a qcow2 target", facts: factsOf(format.QCOW2, qcow2).served(nil), req: request{TargetOptions: TargetOptions{Format: "qcow2"}},
			route: routeRanged, phases: rangedPhases, drained: PhaseConvert, reason: "the target is a qcow2"},

		// the qcow2 route-choice predictions, where both routes are open
		{name: "qcow2 of plain clusters decoded", facts: factsOf(format.QCOW2, qcow2).served(nil).withLayout(plainLayout, 750*mib),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "stream decoder is faster here: clusters after their tables"},
		{name: "qcow2 a third compressed decoded", facts: factsOf(format.QCOW2, qcow2).served(nil).withLayout(someCompr, 520*mib),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "clusters after their tables"},
		{name: "qcow2 mostly compressed decoded", facts: factsOf(format.QCOW2, qcow2).served(nil).withLayout(mostlyCompr, 392*mib),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "clusters after their tables"},
		{name: "qcow2 clusters before their tables over ranges", facts: factsOf(format.QCOW2, qcow2).served(nil).withLayout(earlyLayout, 750*mib),
			route: routeRanged, phases: rangedPhases, drained: PhaseConvert, reason: "data lies before the tables"},
		{name: "qcow2 clusters before their tables within a larger buffer decoded",
			facts: factsOf(format.QCOW2, qcow2).served(nil).withLayout(earlyLayout, 750*mib), req: request{StreamDecodeMaxBuffered: 1 << 30},
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "stream decoder is faster"},
		{name: "qcow2 file mostly unreferenced over ranges", facts: factsOf(format.QCOW2, qcow2).served(nil).withLayout(paddedLayout, 4*700*mib),
			route: routeRanged, phases: rangedPhases, drained: PhaseConvert, reason: "mostly bytes the image does not reference"},
		{name: "qcow2 tables too large over ranges", facts: factsOf(format.QCOW2, qcow2).served(nil).withLayoutErr(fmt.Errorf("reading the qcow2 tables: %w", errdefs.ErrTablesTooLarge)),
			route: routeRanged, phases: rangedPhases, drained: PhaseConvert, reason: "tables too large"},
		{name: "qcow2 tables unreadable over ranges", facts: factsOf(format.QCOW2, qcow2).served(nil).withLayoutErr(errors.New("reading the qcow2 tables: L1 past the end")),
			route: routeRanged, phases: rangedPhases, drained: PhaseConvert, reason: "L1 past the end"},
		{name: "vhdx over ranges decoded", facts: factsOf(format.VHDX, vhdx).served(nil),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "whole blocks"},
		{name: "dynamic vhd over ranges decoded", facts: factsOf(format.VHD, dynamicVHD).served(nil),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "whole blocks"},
		{name: "vdi over ranges decoded", facts: factsOf(format.VDI, dynamicVDI).served(nil),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "whole blocks"},
		{name: "streamOptimized vmdk over ranges decoded", facts: factsOf(format.VMDK, streamVMDK).served(nil),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "one grain per range request"},
		{name: "qcow2 with a checksum decoded", facts: factsOf(format.QCOW2, qcow2).served(nil).checksum(),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "checksum must see every byte"},
		{name: "qcow2 whose range probe failed decoded", facts: factsOf(format.QCOW2, qcow2).served(errors.New("206 expected, got 200")),
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "a range read failed: 206 expected"},
		{name: "qcow2 with ranged reads off decoded", facts: factsOf(format.QCOW2, qcow2).served(nil), req: request{TargetOptions: TargetOptions{NoRangedRead: true}},
			route: routeStreamDecode, phases: streamPhases, drained: PhaseTransferDataFile, reason: "ranged reads are turned off"},

		// NoStreamDecode: the restart after the decoder gave up
		{name: "restarted qcow2 over ranges", facts: factsOf(format.QCOW2, qcow2).served(nil), req: request{TargetOptions: TargetOptions{NoStreamDecode: true}},
			route: routeRanged, phases: rangedPhases, drained: PhaseConvert, reason: "stream decoder is off"},
		{name: "restarted qcow2 stream through scratch", facts: factsOf(format.QCOW2, qcow2), req: request{TargetOptions: TargetOptions{NoStreamDecode: true}},
			route: routeScratch, phases: scratchPhases, drained: PhaseValidate, reason: "stream decoder is off"},

		// a delta pass, and each reason the facts give for an ordinary
		// route instead
		{name: "delta pass onto a copy", facts: factsOf(format.Raw, raw).local().deltaOnto(1<<30, 1<<30), req: deltaReq,
			route: routeDelta, phases: deltaPhases, drained: PhaseVerify, reason: "only the blocks that differ are written, in place",
			check: func(t *testing.T, p *importPlan) {
				assert.Equal(t, verifyBlockHashes, p.Verify)
				assert.True(t, p.Clone)
			}},
		{name: "delta pass of an iso, as-is", facts: factsOf(format.ISO, raw).local().deltaOnto(1<<30, 1<<30), req: withDelta(TargetOptions{ContentType: ContentTypeAsIs}),
			route: routeDelta, phases: deltaPhases, drained: PhaseVerify, reason: "a delta pass"},
		{name: "delta asked, no target yet", facts: factsOf(format.Raw, raw).local().deltaOnto(1<<30, -1), req: deltaReq,
			route: routeStream, phases: streamPhases, drained: PhaseTransferDataFile, reason: "copied as it arrives; no delta pass: the target does not exist yet"},
		{name: "delta asked, target of another size", facts: factsOf(format.Raw, raw).local().deltaOnto(1<<30, 2<<30), req: deltaReq,
			route: routeStream, phases: streamPhases, drained: PhaseTransferDataFile, reason: "no delta pass: the target has 2147483648 bytes, the source 1073741824"},
		{name: "delta asked, target neither file nor device", facts: factsOf(format.Raw, raw).local().deltaOnto(1<<30, 1<<30).noVolume(), req: deltaReq,
			route: routeStream, phases: streamPhases, drained: PhaseTransferDataFile, reason: "no delta pass: the target is neither a regular file nor a block device"},
		{name: "delta asked, compressed source", facts: factsOf(format.Raw, raw, format.XZ).local().deltaOnto(1<<30, 1<<30), req: deltaReq,
			route: routeStream, phases: streamPhases, drained: PhaseTransferDataFile, reason: "no delta pass: the source is compressed ([xz])"},
		{name: "delta asked, qcow2 source", facts: factsOf(format.QCOW2, qcow2).local().deltaOnto(1<<30, 1<<30), req: deltaReq,
			route: routeInPlace, phases: inPlacePhases, drained: PhaseValidate, reason: "no delta pass: the source is a qcow2 image, which is converted"},
		{name: "delta asked, source from stdin", facts: factsOf(format.Raw, raw).oneTime().deltaOnto(1<<30, 1<<30), req: deltaReq,
			route: routeStream, phases: streamPhases, drained: PhaseTransferDataFile, reason: "no delta pass: the source is not a local file or device"},
		{name: "delta asked, archive", facts: factsOf(format.Raw, raw, format.Tar).local().deltaOnto(1<<30, 1<<30), req: withDelta(TargetOptions{ContentType: ContentTypeArchive}),
			route: routeArchive, phases: archivePhases, drained: PhaseTransferDataDir, reason: "no delta pass: an archive is extracted"},
		{name: "delta asked, qcow2 target", facts: factsOf(format.Raw, raw).local().deltaOnto(1<<30, 1<<30), req: withDelta(TargetOptions{Format: "qcow2"}),
			route: routeInPlace, phases: inPlacePhases, drained: PhaseValidate, reason: "no delta pass: the target is a qcow2"},
		{name: "delta asked, size requested", facts: factsOf(format.Raw, raw).local().deltaOnto(1<<30, 1<<30), req: withDelta(TargetOptions{Size: 2 << 30}),
			route: routeStream, phases: streamPhases, drained: PhaseTransferDataFile, reason: "no delta pass: a requested size grows the target"},
		{name: "delta pass received over the wire", facts: &importFacts{format: format.Raw, sourceSize: 1 << 30, deltaReceived: true},
			route: routeDelta, phases: deltaPhases, drained: PhaseVerify, reason: "a delta pass received over the wire"},
		{name: "delta closed by the restart", facts: factsOf(format.Raw, raw).local().deltaOnto(1<<30, 1<<30),
			route: routeStream, phases: streamPhases, drained: PhaseTransferDataFile, reason: "copied as it arrives"},

		// archive and blank
		{name: "archive", facts: factsOf(format.Raw, raw, format.Gzip, format.Tar).served(nil), req: request{TargetOptions: TargetOptions{ContentType: ContentTypeArchive}},
			route: routeArchive, phases: archivePhases, drained: PhaseTransferDataDir, reason: "tar stream extracted"},
		{name: "blank", facts: &importFacts{blank: true}, req: request{TargetOptions: TargetOptions{Format: "qcow2"}},
			route: routeBlank, phases: blankPhases, drained: "", reason: "no source",
			check: func(t *testing.T, p *importPlan) { assert.Equal(t, "qcow2", p.OutputFormat) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan, reason := decide(c.facts, c.req)
			assert.Equal(t, c.route.String(), plan.Route.String(), "reason: %s", reason)
			assert.Equal(t, c.phases, plan.Phases)
			assert.Equal(t, c.drained, plan.SourceDrainedAfter)
			assert.Contains(t, reason, c.reason)
			if !c.req.Delta && !c.facts.deltaReceived {
				assert.NotContains(t, reason, "delta", "only a delta asked for or received is mentioned")
			}
			if plan.Route == routeStreamDecode {
				// The words the import tests find in the log.
				assert.Contains(t, reason, "decoded straight onto the target")
			}
			assert.Equal(t, c.facts.format, plan.SourceFormat)
			if c.check != nil {
				c.check(t, plan)
			}
		})
	}
}
