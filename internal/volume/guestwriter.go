package volume

import (
	"context"
	"fmt"
	"io"
	"os"
)

// GuestWriter takes a decoder's guest writes at random offsets onto a
// target, gathered into large writes with several in flight
// (BatchedWriter): on a block device through a DeviceWriter (its first
// MiB held in memory until Finish); on a file into the target's temporary
// file, empty and sparse, through a directFileWriter (O_DIRECT), or a
// PacedFileWriter where the file system refuses O_DIRECT; Finish cuts the
// file to the disk's size. Close releases all of it on every path, so
// nothing writes the target after the caller returns.
type GuestWriter struct {
	t      *Target
	device *DeviceWriter
	direct *directFileWriter
	batch  *BatchedWriter
	file   *os.File
	paced  *PacedFileWriter
}

// GuestWriterOptions shape a GuestWriter.
type GuestWriterOptions struct {
	// KeepAllocated: zeros written as data keep their blocks allocated
	// (preallocation).
	KeepAllocated bool
	// TargetIsZero: the whole device reads zeros already (Target.ZeroAll),
	// so the ranges that must read as zeros need no writing.
	TargetIsZero bool
}

// NewGuestWriter opens the target for a decoder's guest writes.
func (t *Target) NewGuestWriter(ctx context.Context, o GuestWriterOptions) (*GuestWriter, error) {
	g := &GuestWriter{t: t}
	if t.kind != Block {
		f, err := os.OpenFile(t.writePath, os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		g.file = f
		direct := t.openDirect()
		if direct == nil {
			g.paced = NewPacedFileWriter(f)
			return g, nil
		}
		g.direct = newDirectFileWriter(t.writePath, direct, f)
		g.batch = newBatchedWriter(ctx, g.direct, BatchOptions{})
		return g, nil
	}
	w, err := t.NewDeviceWriter(ctx, DeviceWriterOptions{KeepAllocated: o.KeepAllocated})
	if err != nil {
		return nil, err
	}
	g.device = w
	if o.TargetIsZero {
		g.batch = NewBatchedWriter(ctx, w, BatchOptions{})
	} else {
		g.batch = NewBatchedWriter(ctx, w, BatchOptions{Zeroing: true, MayDeallocate: !o.KeepAllocated})
	}
	return g, nil
}

// Sink is what the decoder writes. Only on a device that may hold old
// data does it have ZeroAt(off, n int64) error (a streamdecode.ZeroSink);
// on a file, new and sparse, and on a zeroed device it has none, so the
// decoder skips holes and all-zero clusters.
func (g *GuestWriter) Sink() io.WriterAt {
	switch {
	case g.paced != nil:
		return g.paced
	case g.batch.zeroing:
		return g.batch
	}
	return struct{ io.WriterAt }{g.batch}
}

// Device is the DeviceWriter under a device's writes, nil on a file.
func (g *GuestWriter) Device() *DeviceWriter { return g.device }

// Written is the bytes written so far, for progress; safe from any
// goroutine.
func (g *GuestWriter) Written() int64 {
	switch {
	case g.paced != nil:
		return g.paced.Written()
	case g.direct != nil:
		return g.direct.Written()
	}
	return g.device.Written()
}

// Flush puts every gathered write on the target and waits for it (a
// PacedFileWriter has nothing gathered).
func (g *GuestWriter) Flush() error {
	if g.batch == nil {
		return nil
	}
	return g.batch.Flush()
}

// Finish ends a complete decode of a disk of size bytes, after Flush and
// once the source is verified: a device's held-back head is written
// (DeviceWriter.Finish), a file is cut to size.
func (g *GuestWriter) Finish(ctx context.Context, size int64) error {
	if g.device != nil {
		return g.device.Finish(ctx)
	}
	if err := g.file.Truncate(size); err != nil {
		return fmt.Errorf("setting the size of %s: %w", g.t.writePath, err)
	}
	return nil
}

// Close stops the batched writers after the requests already started and
// closes the file's descriptors. Safe to call more than once.
func (g *GuestWriter) Close() {
	if g.batch != nil {
		g.batch.Close()
	}
	if g.direct != nil {
		g.direct.Close() // a second Close is refused by os.File; g.direct stays for Written
	}
	if g.file != nil {
		g.file.Close()
		g.file = nil
	}
}
