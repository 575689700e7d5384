package nbdserver

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"

	"github.com/diskimport/engine/internal/iostage"
)

// ImageReader is an image read at random from elsewhere, opened when its
// export starts and closed when it stops (datasource.RangeReader: an HTTP
// object read with byte ranges).
type ImageReader interface {
	io.ReaderAt
	io.Closer
	Size() int64
}

// ImageExport serves an ImageReader to qemu-img as a read-only NBD export.
// Our own client does the range reads (credentials, CA, headers,
// retries); qemu-img never talks HTTP itself (its curl driver hangs now
// and then on qemu 7.2).
type ImageExport struct {
	unix   *UnixExport
	reader ImageReader
	// counted is reader counting into ImageExportOptions.Wire: what
	// qemu-img and our checks read is what crossed the wire.
	counted io.ReaderAt
}

// ImageExportOptions are how ServeImage serves the image.
type ImageExportOptions struct {
	// Wire counts the bytes every read asks of the reader (nil: not
	// counted).
	Wire *iostage.RangeCounter
	// NoReadAhead serves each read from the reader itself instead of
	// read-ahead windows (iostage.WindowReaderAt); only to measure them
	// (BenchmarkRangedConvert).
	NoReadAhead bool
	Logger      *slog.Logger
}

// ServeImage opens the image and serves it on a Unix socket, small reads
// from read-ahead windows unless o.NoReadAhead.
func ServeImage(ctx context.Context, open func(context.Context) (ImageReader, error), o ImageExportOptions) (*ImageExport, error) {
	e := &ImageExport{}
	u, err := ServeUnix(ctx, "importer-nbd-*", "image.sock", "reading the image over HTTP", func(ctx context.Context) (*Server, error) {
		r, err := open(ctx)
		if err != nil {
			return nil, err
		}
		e.reader = r
		e.counted = r
		if o.Wire != nil {
			e.counted = iostage.CountReaderAt(r, o.Wire)
		}
		served := e.counted
		if !o.NoReadAhead {
			served = iostage.NewWindowReaderAt(e.counted, r.Size())
		}
		return New(served, r.Size(), o.Logger), nil
	})
	if err != nil {
		return nil, err
	}
	e.unix = u
	return e, nil
}

// ReaderAt is the image as the export reads it (counted, without the
// read-ahead windows): for checks that must judge the bytes qemu-img is
// served.
func (e *ImageExport) ReaderAt() io.ReaderAt { return e.counted }

// Size is the image's size in bytes.
func (e *ImageExport) Size() int64 { return e.reader.Size() }

// QemuSpec is the qemu-img filename of the export. "backing": null keeps
// qemu-img from opening any backing file the image might name, even if it
// served a different header to our own check.
func (e *ImageExport) QemuSpec() string {
	b, _ := json.Marshal(map[string]any{"backing": nil, "file": e.unix.QemuNode()})
	return "json:" + string(b)
}

// QemuNames are the names qemu-img may report for the image it opened
// through the export: its socket's two NBD URI forms.
func (e *ImageExport) QemuNames() []string {
	sock := e.unix.SocketPath()
	return []string{"nbd+unix://?socket=" + sock, "nbd+unix:///?socket=" + sock}
}

// Cause prefers the export's own read error over qemu-img's bare
// "Input/output error". Safe on nil (no export).
func (e *ImageExport) Cause(err error) error {
	if e == nil {
		return err
	}
	return e.unix.Cause(err)
}

// Err is the export's own I/O error (an HTTP read that failed), nil while
// every read was served. Safe on nil.
func (e *ImageExport) Err() error {
	if e == nil {
		return nil
	}
	return e.unix.Err()
}

// Stop ends the server, aborts reads in flight (by closing the reader)
// and removes the socket directory. Safe to call more than once and on
// nil.
func (e *ImageExport) Stop(log *slog.Logger) {
	if e == nil {
		return
	}
	e.unix.Stop(log, func() { e.reader.Close() })
}
