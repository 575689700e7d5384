package importer

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/cpulimit"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/streamdecode"
	"github.com/diskimport/engine/internal/volume"
)

// spillDir is where the decoder may spill what it holds past its memory
// bound: the request's scratch directory when it is usable ("" when not).
func (a *attempt) spillDir() string {
	dir, err := a.scratchDir()
	if err != nil {
		return ""
	}
	return dir
}

// decodeStream is TransferDataFile on routeStreamDecode: the image stream
// (after the checksum tee, so the digest is computed in the same pass) is
// decoded by internal/streamdecode into guest writes at random offsets on
// the target (volume.GuestWriter: a block device through a
// volume.DeviceWriter, which holds its first MiB in memory until Finish; a
// file target's temporary file, empty and sparse, cut to the virtual size
// at the end).
// The decoder applies format.CheckQCOW2/CheckVMDK's structural checks as
// the bytes pass (every reference inside the image, no backing or data
// file, the sizes); Info already checked the header and the virtual size
// against the target. What it opens (the guest writer) it closes before it
// returns.
func (a *attempt) decodeStream(ctx context.Context) error {
	out, err := a.target.NewGuestWriter(ctx, volume.GuestWriterOptions{KeepAllocated: a.req.Preallocation, TargetIsZero: a.targetZeroed})
	if err != nil {
		return fmt.Errorf("opening %s for writing: %w", a.target.Path(), err)
	}
	defer out.Close()
	a.meter.decoded.Store(out)
	sink, content := streamdecode.WithContentHash(out.Sink())
	img := a.source.image
	var in io.Reader = img
	if readStreamAhead(len(img.Compressions) > 0, a.caps.ReadAhead, a.source.verifier != nil, cpulimit.Workers()) {
		ra := iostage.NewReadAhead(img, streamReadAheadSize, streamReadAheadBuffers)
		defer ra.Close()
		in = ra
	}
	spill := a.spillDir()
	st, err := streamdecode.Decode(ctx, in, img.Format, sink, streamdecode.Options{
		MaxBuffered: a.req.StreamDecodeMaxBuffered, SpillDir: spill, MaxSpill: a.req.MaxSpill,
		TargetSize: a.target.Capacity(),
	})
	a.noteSpill(st)
	var se *errdefs.SizeError
	if errors.As(err, &se) && se.TargetSize == a.target.Capacity() {
		// The decoder knows the capacity, not the target: the target's
		// error says what the capacity is (a file system's free space?).
		err = a.target.TooSmall(se.ImageSize, se.What)
	}
	if err != nil {
		return a.decodeFailed(err, img.Format, spill)
	}
	// Every gathered write is on the device before the source is called
	// complete and long before Finish writes the head.
	if err := out.Flush(); err != nil {
		return fmt.Errorf("writing the decoded %s image onto %s: %w", img.Format, a.target.Path(), err)
	}
	// The rest of the image stream (padding, what follows the last
	// cluster) is read through the decompressors, so their own integrity
	// checks run, and then the source is drained and its checksums
	// verified: all before the head of a device is written.
	if _, err := io.Copy(io.Discard, in); err != nil {
		return fmt.Errorf("reading the end of %s: %w", a.req.Source, err)
	}
	if err := a.source.drain(a); err != nil {
		return err
	}
	a.result.VirtualSize = st.VirtualSize
	a.result.BytesWritten = st.VirtualSize
	if err := a.takeContentDigest(content.Sum(st.VirtualSize)); err != nil {
		return err
	}
	if err := out.Finish(ctx, st.VirtualSize); err != nil {
		return err
	}
	a.result.DataBytes = st.DataBytes
	if dev := out.Device(); dev != nil {
		a.result.DataBytes = dev.DataBytes()
	}
	a.log.Info("Image decoded onto the target", "virtualSize", st.VirtualSize, "dataBytes", a.result.DataBytes,
		"streamBytes", st.StreamBytes, "compressedClusters", st.Compressed, "peakBuffered", st.PeakBuffered,
		"spilledBytes", st.SpilledBytes, "peakSpilled", st.PeakSpilled, "contentDigestPeakHeld", content.PeakHeld())
	return nil
}

// noteSpill records scratch space the decoder used: only bytes it had to
// spill make an import one that used scratch.
func (a *attempt) noteSpill(st streamdecode.Stats) {
	if st.SpilledBytes == 0 {
		return
	}
	a.result.ScratchUsed = true
	a.result.ScratchBytes += st.SpilledBytes
	a.log.Info("Clusters that arrived before their tables were spilled to the scratch directory",
		"dir", a.req.ScratchDir, "spilledBytes", st.SpilledBytes, "peakSpilled", st.PeakSpilled)
}

// decodeFailed is the attempt's error for a failed decode. A layout the
// decoder cannot follow in one pass restarts the import without the
// decoder when the source can be read again (routeClosedError); a
// one-time stream cannot be, and fails: with ErrScratchSpaceRequired when
// only the missing scratch directory stopped it, so CDI's controller adds
// one and the upload is sent again.
func (a *attempt) decodeFailed(err error, f format.Format, spill string) error {
	if !errors.Is(err, errdefs.ErrNotStreamable) || errors.Is(err, errdefs.ErrCancelled) {
		return fmt.Errorf("decoding %s image onto %s: %w", f, a.target.Path(), err)
	}
	if !a.caps.OneTime {
		return &routeClosedError{route: routeStreamDecode, err: err}
	}
	var be *streamdecode.BufferError
	if errors.As(err, &be) && spill == "" && !be.Bookkeeping {
		return &overflowError{source: a.req.Source.String(), format: f, dir: a.req.ScratchDir, need: be.Need, max: be.Max}
	}
	return fmt.Errorf("the %s image from %s has a layout the stream decoder cannot follow, and the source cannot be read a second time for the scratch route: %w",
		f, a.req.Source, err)
}

// readStreamAhead tells whether decodeStream reads an image stream ahead
// on a goroutine of its own (iostage.ReadAhead). An uncompressed stream
// is, as format.Open does under a decompressor: the receive syscalls run
// on the second CPU while the decoder maps and copies. Not when the source
// reads ahead itself (several connections) and no checksum is computed on
// the way: that goroutine would only copy every byte once more (qcow2 over
// 16 connections, 256M bench disk: 5 % of the import's CPU in that copy,
// perf). Nor without a second CPU (workers, cpulimit.Workers, 1 as under
// CDI's 750m): nothing then runs sooner, and the copy costs CPU-time the
// quota turns into wall time. Under a 75 ms / 100 ms CFS quota, the 1 GiB
// bench disk as a qcow2 over one GET from 127.0.0.1 onto a file, medians
// of 5 interleaved runs: 0.75 -> 0.66 CPU-s, 1.02 -> 0.91 s.
func readStreamAhead(compressed, sourceReadsAhead, checksummed bool, workers int) bool {
	return !compressed && !(sourceReadsAhead && !checksummed) && workers > 1
}

// The read-ahead of an uncompressed image stream: a few buffers as large
// as the decoder's own reads.
const (
	streamReadAheadSize    = 1 << 20
	streamReadAheadBuffers = 4
)

// overflowError: a one-time stream whose clusters arrive before their
// tables needed more than the decoder's memory bound and there was no
// usable scratch directory to spill to.
type overflowError struct {
	source, dir string
	format      format.Format
	need, max   int64
}

func (e *overflowError) Error() string {
	where := fmt.Sprintf("the scratch directory %q is not usable", e.dir)
	if e.dir == "" {
		where = "this import was given no scratch space"
	}
	return fmt.Sprintf("%s: the %s image from %s stores clusters before the tables that map them; holding them needs at least %d bytes of scratch space (the decoder keeps %d in memory), and %s",
		errdefs.ErrScratchSpaceRequired, e.format, e.source, e.need-e.max, e.max, where)
}

func (e *overflowError) Unwrap() error { return errdefs.ErrScratchSpaceRequired }
