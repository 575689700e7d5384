package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sync/atomic"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/format"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/volume"
	"github.com/diskimport/engine/qemu"
)

// job is the state one import carries from phase to phase. Fields the
// progress reporter reads from another goroutine are atomics.
type job struct {
	opts       Request
	log        *slog.Logger
	qemu       *qemu.Runner
	source     datasource.Source
	checksums  []iostage.Checksum
	scratchDir string
	result     Result

	phase          atomic.Value // string
	counter        atomic.Pointer[iostage.Counter]
	sourceSize     atomic.Int64
	writer         atomic.Pointer[volume.Writer]
	convertPercent atomic.Uint64 // math.Float64bits

	tgt      *volume.Target
	plan     *Plan // Info's decision; set once Info returned
	body     io.Closer
	wire     io.Reader // the source bytes as received, hashed when checksums are set
	verifier *iostage.Verifier
	image    *format.Stream

	// The file qemu-img converts from: the source itself when it is a local
	// uncompressed image, else a scratch copy, or the NBD export of an HTTP
	// object (ranged.go).
	convertSrc  string
	scratchPath string
	rangedSrc   *datasource.RangedURL
	export      *rangedExport // ranged.go: serves rangedSrc to qemu-img over NBD
	// deviceWritten: the image's first MiB reached the block target
	// through the conversion's export, so a later failure (verify, commit)
	// must wipe it. Before that it was only in our memory.
	deviceWritten bool
	// deviceWriter writes the block target for qemu-img (targetexport.go);
	// the progress reporter reads its byte count.
	deviceWriter atomic.Pointer[volume.DeviceWriter]

	// Clone (clone.go): the source's local path ("" for streams), and
	// whether the whole block target was zeroed so zero runs may be skipped.
	localSource  string
	targetZeroed bool

	// staging is the directory an archive is extracted into until Commit
	// moves it into place (archive.go); "" once committed.
	staging string
}

// info opens the target and the source, peels compression, identifies the
// image, checks what its header tells before a byte reaches the target, and
// decides the plan.
func (j *job) info(ctx context.Context) (*Plan, error) {
	if j.opts.ContentType != "" && j.opts.ContentType != ContentTypeKubevirt {
		return j.archiveInfo(ctx) // archive.go
	}
	tgt, err := volume.Open(ctx, volume.Options{
		Path:               j.opts.Target,
		RequestedSize:      j.opts.Size,
		FilesystemOverhead: j.opts.FilesystemOverhead,
		Logger:             j.log,
	})
	if err != nil {
		return nil, fmt.Errorf("opening target %s: %w", j.opts.Target, err)
	}
	j.tgt = tgt
	j.result.Target = tgt.Path()
	out := "raw"
	if j.opts.Format == "qcow2" {
		if tgt.Kind() == volume.Block {
			return nil, fmt.Errorf("target %s is a block device, which holds raw data only; qcow2 needs a file target: %w", tgt.Path(), errdefs.ErrInvalidOptions)
		}
		out = "qcow2"
	}

	st, img, err := j.openSource(ctx) // source.go
	if err != nil {
		return nil, err
	}
	j.log.Info("Image detected", "format", img.Format, "compression", j.result.Compressions,
		"virtualSize", img.Header.VirtualSize, "sourceSize", st.Size, "target", tgt.Path(), "targetCapacity", tgt.Capacity())

	if err := j.checkEarlySize(ctx, img, st); err != nil {
		return nil, err
	}
	if err := j.checkClone(ctx, img, st); err != nil {
		return nil, err
	}

	plan := &Plan{
		SourceFormat:  img.Format,
		Compressions:  img.Compressions,
		OutputFormat:  out,
		ConvertFormat: img.Format,
		Clone:         st.LocalPath != "",
		TargetZeroed:  j.targetZeroed,
	}
	switch {
	case !img.Format.NeedsConversion() && out == "raw":
		plan.Route = RouteStream
	case j.useRanged(ctx, st, img):
		j.log.Info("The server serves byte ranges: qemu-img reads the image in place, no scratch copy", "url", j.source.String())
		plan.Route = RouteRanged
		j.rangedSrc = st.Ranged
	case st.LocalPath != "" && len(img.Compressions) == 0:
		// qemu-img reads a local image in place: no copy.
		plan.Route = RouteInPlace
		j.convertSrc = st.LocalPath
	default:
		plan.Route = RouteScratch
		if !img.Format.NeedsConversion() {
			plan.ConvertFormat = format.Raw
		}
	}
	if j.opts.Verify {
		plan.Verify = VerifyCompare
		if plan.Route == RouteStream {
			plan.Verify = VerifyDigests
		}
	}
	plan.Phases, plan.SourceDrainedAfter = PhasesFor(plan.Route, j.opts.Verify)
	j.log.Info("Import planned", "route", plan.Route.String(), "phases", plan.Phases)
	return plan, nil
}

// checkEarlySize refuses an image whose size is known up front and does not
// fit, before anything is written.
func (j *job) checkEarlySize(ctx context.Context, img *format.Stream, st *datasource.Stream) error {
	capacity := j.tgt.Capacity()
	if v := img.Header.VirtualSize; v > 0 {
		j.result.VirtualSize = v
		if v > capacity {
			return &errdefs.SizeError{ImageSize: v, TargetSize: capacity}
		}
		return nil
	}
	if img.Format.NeedsConversion() || len(img.Compressions) > 0 || st.Size < 0 {
		return nil
	}
	if st.LocalPath != "" {
		// A DMG is known only by its last sector: read it now, so a local
		// one is refused before a byte reaches the target (a stream is
		// refused at its end, before its held-back head is written).
		tail, err := readLastSector(ctx, st)
		if err != nil {
			return err
		}
		if err := format.CheckTrailer(tail); err != nil {
			return err
		}
	}
	if st.Size <= capacity {
		return nil
	}
	tooBig := &errdefs.SizeError{ImageSize: st.Size, TargetSize: capacity, What: "image size"}
	if st.Size-fixedVHDFooterSize > capacity {
		return tooBig
	}
	// One sector too many: fine only if that sector is a fixed VHD's footer,
	// which does not go to the disk. Where the end can be read now (a local
	// file or device, or a server that serves ranges), decide before a byte
	// is written; a plain stream is decided at its end (copyRaw).
	tail, err := readLastSector(ctx, st)
	if err != nil {
		return err
	}
	if tail != nil && !format.IsFixedVHDFooter(tail, st.Size-fixedVHDFooterSize) {
		return tooBig
	}
	return nil
}

const fixedVHDFooterSize = 512

// transferDataFile streams raw data straight onto the target in one pass.
func (j *job) transferDataFile(ctx context.Context) error {
	n, err := j.copyRaw(ctx, j.tgt)
	if err != nil {
		return err
	}
	j.result.BytesWritten = n
	j.result.VirtualSize = n
	j.result.DataBytes = j.writer.Load().DataBytes()
	return nil
}

// copyRaw copies the image stream to a target's sequential writer, keeps a
// fixed VHD footer out of the disk, verifies the checksums, and only then
// lets the writer put down the held-back head of the image.
func (j *job) copyRaw(ctx context.Context, t *volume.Target) (int64, error) {
	w, err := t.NewWriter(volume.WithContext(ctx), volume.WithTargetIsZero(j.targetZeroed && t == j.tgt))
	if err != nil {
		return 0, fmt.Errorf("opening %s for writing: %w", t.Path(), err)
	}
	j.writer.Store(w)
	var src io.Reader = j.image
	var tail *iostage.TailHolder
	if j.image.Format == format.Raw {
		tail = iostage.NewTailHolder(j.image, fixedVHDFooterSize)
		src = tail
	}
	if _, err := w.ReadFrom(src); err != nil {
		// Source errors name the source and target errors the target.
		return 0, err
	}
	if tail != nil {
		if err := format.CheckTrailer(tail.Tail()); err != nil {
			return 0, err // a DMG: known by its trailer; the head was never written
		}
		if format.IsFixedVHDFooter(tail.Tail(), w.Written()) {
			j.log.Info("Fixed VHD footer found at the end of the stream; it is not part of the disk")
			j.result.SourceFormat = string(format.VHD)
		} else if _, err := w.Write(tail.Tail()); err != nil {
			return 0, fmt.Errorf("writing image to %s: %w", t.Path(), err)
		}
	}
	if err := j.finishSource(); err != nil {
		return 0, err
	}
	n, err := w.Finish()
	if err != nil {
		return 0, fmt.Errorf("writing image to %s: %w", t.Path(), err)
	}
	return n, nil
}

// finishSource stops the decoders, reads whatever the source still holds
// (so the digest covers every byte received) and verifies the checksums.
func (j *job) finishSource() error {
	if err := j.image.Close(); err != nil {
		return fmt.Errorf("closing image stream: %w", err)
	}
	if j.verifier == nil {
		return nil
	}
	if _, err := io.Copy(io.Discard, j.wire); err != nil {
		return fmt.Errorf("reading the rest of %s: %w", j.source, err)
	}
	sums, err := j.verifier.Verify()
	if err != nil {
		return fmt.Errorf("verifying %s: %w", j.source, err)
	}
	for _, s := range sums {
		j.result.Checksums = append(j.result.Checksums, s.String())
	}
	j.log.Info("Checksum verified", "checksums", j.result.Checksums)
	return nil
}

// transferScratch puts the decompressed image in a sparse scratch file so
// qemu-img can read it at random.
func (j *job) transferScratch(ctx context.Context) error {
	if st, err := os.Stat(j.scratchDir); err != nil || !st.IsDir() {
		return fmt.Errorf("%w: scratch directory %s is not usable: %v", errdefs.ErrScratchSpaceRequired, j.scratchDir, err)
	}
	f, err := os.CreateTemp(j.scratchDir, "importer-scratch-*."+string(j.image.Format))
	if err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrScratchSpaceRequired, err)
	}
	j.scratchPath = f.Name()
	f.Close()
	j.result.ScratchUsed = true

	scratch, err := volume.Open(ctx, volume.Options{Path: j.scratchPath, Scratch: true, Logger: j.log})
	if err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrScratchSpaceRequired, err)
	}
	defer scratch.Close()
	if _, err := j.copyRaw(ctx, scratch); err != nil {
		scratch.Abort()
		if errors.Is(err, errdefs.ErrTargetTooSmall) {
			return fmt.Errorf("%w: scratch directory %s: %v", errdefs.ErrScratchSpaceRequired, j.scratchDir, err)
		}
		return err
	}
	if err := scratch.Commit(ctx); err != nil {
		return fmt.Errorf("finishing scratch file %s: %w", j.scratchPath, err)
	}
	j.convertSrc = j.scratchPath
	return nil
}

// validate checks the image qemu-img is about to read: structure, no
// references to other files, and a virtual size that fits the target.
func (j *job) validate(ctx context.Context) error {
	if j.plan.Route == RouteRanged {
		// Served to qemu-img over NBD until Convert ends (ranged.go).
		if err := j.startExport(ctx); err != nil {
			return err
		}
	}
	src, f := j.convertSrc, j.plan.ConvertFormat
	if j.plan.Route == RouteInPlace && j.verifier != nil {
		// A local image converted in place: hash it before trusting it.
		if err := j.finishSource(); err != nil {
			return err
		}
	}
	if j.plan.Route != RouteRanged { // a remote image was checked, on its HTTP bytes, as its export started
		if err := checkStructureFile(f, src); err != nil {
			return err
		}
	}
	info, err := j.qemu.Info(ctx, src, f.QemuName())
	if err != nil {
		if rerr := j.export.cause(err); rerr != err {
			return rerr // the HTTP side failed, not the image
		}
		return fmt.Errorf("%w: %w", errdefs.ErrInvalidImage, err)
	}
	// What qemu-img itself opened, on every path alike: the very source
	// it will convert must be nothing but the image.
	if err := checkInfoSelfContained(info, selfNames(src, j.export)...); err != nil {
		return err
	}
	if err := j.qemu.Check(ctx, src, f.QemuName()); err != nil {
		return j.export.cause(err)
	}
	j.result.VirtualSize = info.VirtualSize
	if capacity := j.tgt.Capacity(); info.VirtualSize > capacity {
		return &errdefs.SizeError{ImageSize: info.VirtualSize, TargetSize: capacity}
	}
	if err := j.checkExactSize(info.VirtualSize); err != nil {
		return err
	}
	return nil
}

// convert writes the target with qemu-img and drops the scratch copy. A
// block device is written through our own NBD export of it
// (targetexport.go), which keeps the image's first MiB in memory until
// qemu-img succeeded and the rest is synced: qemu-img never opens the
// device, and a kill at any moment leaves no bootable-looking disk.
func (j *job) convert(ctx context.Context) error {
	block := j.tgt.Kind() == volume.Block
	dst := j.tgt.WritePath()
	var dev *targetExport
	if block {
		e, err := startTargetExport(ctx, j.tgt, j.opts.Preallocation, j.log)
		if err != nil {
			return fmt.Errorf("serving %s to qemu-img: %w", j.tgt.Path(), err)
		}
		dev = e
		defer dev.stop(j.log)
		j.deviceWriter.Store(dev.writer)
		dst = dev.spec()
	}
	applied, err := j.qemu.Convert(ctx, j.convertSrc, dst, qemu.ConvertOptions{
		SrcFormat:    j.plan.ConvertFormat.QemuName(),
		DstFormat:    j.plan.OutputFormat,
		CacheMode:    j.cacheMode(block),
		Preallocate:  j.opts.Preallocation,
		TargetExists: block,
		TargetIsZero: j.plan.TargetZeroed,
		Progress: func(p float64) {
			j.convertPercent.Store(math.Float64bits(p))
		},
	})
	err = dev.cause(j.export.cause(err))
	if !j.opts.Verify {
		j.stopExport() // ranged.go
	}
	if err == nil && dev != nil {
		err = j.finishDevice(ctx, dev)
	}
	if err != nil {
		return fmt.Errorf("converting %s image to %s: %w", j.plan.ConvertFormat, j.plan.OutputFormat, err)
	}
	j.result.PreallocationApplied = applied
	j.result.BytesWritten = j.result.VirtualSize
	if !j.opts.Verify { // else Verify compares the target with the scratch copy
		j.removeScratch()
	}
	return nil
}

// finishDevice ends the export after qemu-img succeeded, refuses the result
// if any write failed (even one qemu-img did not report), and writes the
// held-back head; from then on a failure must wipe it (abort).
func (j *job) finishDevice(ctx context.Context, dev *targetExport) error {
	dev.stop(j.log)
	if err := dev.server.Err(); err != nil {
		return fmt.Errorf("writing %s: %w", j.tgt.Path(), err)
	}
	if err := dev.writer.Finish(ctx); err != nil {
		return err
	}
	j.deviceWritten = true
	j.result.DataBytes = dev.writer.DataBytes()
	return nil
}

// cacheMode picks qemu-img's target cache: O_DIRECT unless asked otherwise
// or the target's filesystem refuses it (tmpfs).
func (j *job) cacheMode(block bool) string {
	switch j.opts.CacheMode {
	case "none", "writeback":
		return j.opts.CacheMode
	case "trynone", "TRYNONE":
		if block || supportsDirectIO(j.tgt.WritePath()) {
			return "none"
		}
		return "writeback"
	}
	// Default: O_DIRECT wherever the target takes it. Through the page cache
	// qemu-img left ~680 MiB dirty importing a 1 GiB image into a file, which
	// a 600 MB pod cannot afford.
	if block || supportsDirectIO(j.tgt.WritePath()) {
		return "none"
	}
	return "writeback"
}

func (j *job) removeScratch() {
	if j.scratchPath == "" {
		return
	}
	if err := os.Remove(j.scratchPath); err != nil && !os.IsNotExist(err) {
		j.log.Warn("Removing scratch file failed", "path", j.scratchPath, "err", err)
	}
	j.scratchPath = ""
}

// abort releases a failed target. A converted block device whose head was
// already written is wiped (defence in depth: only verify or commit can
// fail that late).
func (j *job) abort() {
	if j.tgt != nil && j.deviceWritten {
		if err := j.tgt.ClearHead(); err != nil {
			j.log.Warn("Wiping the first MiB of the failed target failed", "target", j.tgt.Path(), "err", err)
		} else {
			j.log.Info("Wiped the first MiB of the failed target so it does not look bootable", "target", j.tgt.Path())
		}
	}
	if j.tgt != nil {
		if err := j.tgt.Abort(); err != nil {
			j.log.Warn("Cleaning up the target failed", "target", j.tgt.Path(), "err", err)
		}
	}
}

func (j *job) cleanup() {
	if j.image != nil {
		j.image.Close()
	}
	if j.body != nil {
		j.body.Close()
	}
	j.removeScratch()
	j.removeStaging()
	j.stopExport()
	if j.tgt != nil {
		j.tgt.Close()
	}
}
