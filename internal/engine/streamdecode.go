package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/format"
	"github.com/diskimport/engine/internal/streamdecode"
	"github.com/diskimport/engine/internal/volume"
)

// useStreamDecode says whether a streamed convertible image is decoded
// straight onto the target by internal/streamdecode instead of going
// through a scratch copy and qemu-img. It needs a raw target, a qcow2 or a
// streamOptimized vmdk (a monolithicSparse vmdk has no grain markers to
// follow), a qcow2 without internal snapshots (the decoder skips them, and
// only qemu-img check reads their table), no read-back verification (qemu-img compare needs a copy of the
// source to read at random) and a source that can be opened again: a
// layout the decoder cannot stream is only found mid-stream, and then the
// import starts over on the scratch route (restart.go), which a one-time
// stream (stdin, an upload) could not do.
func (a *attempt) useStreamDecode(st *datasource.Transfer, img *format.Image, out string) bool {
	if a.req.NoStreamDecode || out != "raw" || a.req.Verify {
		return false
	}
	if img.Format != format.QCOW2 && !streamOptimized(img) {
		return false
	}
	if img.Format == format.QCOW2 && img.Header.Snapshots > 0 {
		// The decoder skips internal snapshots; their table is checked
		// only by qemu-img check, on the scratch route.
		a.log.Info("The qcow2 image has internal snapshots, whose tables qemu-img checks; copying it to scratch",
			"source", a.req.Source.String(), "snapshots", img.Header.Snapshots)
		return false
	}
	if !datasource.Replayable(a.req.Source, st) {
		a.log.Info("The image is streamable but the source cannot be read again should the decoder fall back; copying it to scratch",
			"source", a.req.Source.String(), "format", img.Format)
		return false
	}
	a.log.Info("Streamed image decoded straight onto the target, no scratch copy",
		"source", a.req.Source.String(), "format", img.Format, "compression", a.result.Compressions,
		"checksum", a.source.verifier != nil)
	return true
}

// streamDecode is TransferDataFile on RouteStreamDecode: the image stream
// (after the checksum tee, so the digest is computed in the same pass) is
// decoded by internal/streamdecode into guest writes at random offsets on
// the target. A block device is written through a volume.DeviceWriter,
// which holds its first MiB in memory until Finish; a file target is its
// temporary file, empty and sparse, cut to the virtual size at the end.
// The decoder applies format.CheckQCOW2/CheckVMDK's structural checks as
// the bytes pass (every reference inside the image, no backing or data
// file, the sizes); Info already checked the header and the virtual size
// against the target.
type streamDecode struct{ a *attempt }

func (s *streamDecode) run(ctx context.Context) error {
	a := s.a
	var (
		sink   streamdecode.Sink
		dev    *volume.DeviceWriter
		file   *os.File
		counts *countingSink
	)
	if a.target.Kind() == volume.Block {
		w, err := a.target.NewDeviceWriter(ctx, volume.DeviceWriterOptions{KeepAllocated: a.req.Preallocation})
		if err != nil {
			return fmt.Errorf("opening %s for writing: %w", a.target.Path(), err)
		}
		dev = w
		a.meter.deviceWriter.Store(w)
		if a.targetZeroed {
			sink = plainDevice{w} // the device reads zeros already: holes are skipped
		} else {
			sink = zeroingDevice{w, !a.req.Preallocation}
		}
	} else {
		f, err := os.OpenFile(a.target.WritePath(), os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("opening %s for writing: %w", a.target.WritePath(), err)
		}
		defer f.Close()
		file = f
		counts = &countingSink{f: f}
		a.meter.decodedFile.Store(counts)
		sink = counts
	}
	img := a.source.image
	st, err := streamdecode.Decode(ctx, img, img.Format, sink, streamdecode.Options{MaxBuffered: a.req.StreamDecodeMaxBuffered})
	if err != nil {
		if errors.Is(err, errdefs.ErrNotStreamable) && !errors.Is(err, errdefs.ErrCancelled) {
			return &notStreamableError{err: err}
		}
		return fmt.Errorf("decoding %s image onto %s: %w", img.Format, a.target.Path(), err)
	}
	// The rest of the image stream (padding, what follows the last
	// cluster) is read through the decompressors, so their own integrity
	// checks run, and then the source is drained and its checksums
	// verified: all before the head of a device is written.
	if _, err := io.Copy(io.Discard, img); err != nil {
		return fmt.Errorf("reading the end of %s: %w", a.req.Source, err)
	}
	if err := a.source.drain(a); err != nil {
		return err
	}
	a.result.VirtualSize = st.VirtualSize
	a.result.BytesWritten = st.VirtualSize
	if dev != nil {
		if err := dev.Finish(ctx); err != nil {
			return err
		}
		a.headWritten = true
		a.result.DataBytes = dev.DataBytes()
	} else {
		if err := file.Truncate(st.VirtualSize); err != nil {
			return fmt.Errorf("setting the size of %s: %w", a.target.WritePath(), err)
		}
		a.result.DataBytes = st.DataBytes
	}
	a.log.Info("Image decoded onto the target", "virtualSize", st.VirtualSize, "dataBytes", a.result.DataBytes,
		"streamBytes", st.StreamBytes, "compressedClusters", st.Compressed, "peakBuffered", st.PeakBuffered)
	return nil
}

// notStreamableError fails an attempt on RouteStreamDecode whose image has
// a layout the decoder cannot follow in one pass: the restart loop starts
// the import over with Request.NoStreamDecode set, so it takes the scratch
// route.
type notStreamableError struct{ err error }

func (e *notStreamableError) Error() string { return e.err.Error() }
func (e *notStreamableError) Unwrap() error { return e.err }

// decodeWritebackWindow is how much a file target may gather dirty before
// its writeback is started; the batch before is waited for then, so about
// two windows are dirty or under writeback at once.
const decodeWritebackWindow = 32 << 20

// countingSink writes a file target through the page cache, counts the
// bytes for progress and paces writeback: the decoder writes at any
// offset, so each window starts writeback of the whole file after waiting
// for the window before, and drops the pages already written (nothing
// reads them again). Dirty page cache is what gets a small pod
// OOM-killed. The decoder calls WriteAt from one goroutine.
type countingSink struct {
	f       *os.File
	written atomic.Int64
	pending int64 // bytes written since writeback was last started
}

func (c *countingSink) WriteAt(p []byte, off int64) (int, error) {
	n, err := c.f.WriteAt(p, off)
	c.written.Add(int64(n))
	c.pending += int64(n)
	if err == nil && c.pending >= decodeWritebackWindow {
		c.pending = 0
		err = c.writeback()
	}
	return n, err
}

func (c *countingSink) writeback() error {
	fd := int(c.f.Fd())
	if err := unix.SyncFileRange(fd, 0, 0, unix.SYNC_FILE_RANGE_WAIT_BEFORE); err != nil {
		return fmt.Errorf("sync_file_range %s: %w", c.f.Name(), err)
	}
	_ = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED) // advisory: clean pages only
	if err := unix.SyncFileRange(fd, 0, 0, unix.SYNC_FILE_RANGE_WRITE); err != nil {
		return fmt.Errorf("sync_file_range %s: %w", c.f.Name(), err)
	}
	return nil
}

// zeroingDevice is a device whose old content must be zeroed where the
// image has none; mayDeallocate unless the target is preallocated.
type zeroingDevice struct {
	w             *volume.DeviceWriter
	mayDeallocate bool
}

func (d zeroingDevice) WriteAt(p []byte, off int64) (int, error) { return d.w.WriteAt(p, off) }
func (d zeroingDevice) ZeroAt(off, n int64) error {
	return d.w.ZeroAt(off, n, d.mayDeallocate, false)
}

// plainDevice is a device that was zeroed whole by Info.
type plainDevice struct{ w *volume.DeviceWriter }

func (d plainDevice) WriteAt(p []byte, off int64) (int, error) { return d.w.WriteAt(p, off) }
