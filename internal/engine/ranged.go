package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/format"
	"github.com/diskimport/engine/internal/iostage"
	"github.com/diskimport/engine/internal/nbdserver"
)

// rangedExport serves the HTTP object to qemu-img as a read-only NBD
// export. Our own client does the range reads (credentials, CA, headers,
// retries); qemu-img never talks HTTP itself (its curl driver hangs now and
// then on qemu 7.2).
type rangedExport struct {
	unix   *nbdserver.UnixExport
	reader *datasource.RangeReader
	// counted is reader counting into the meter's wire bytes: what
	// qemu-img and our checks read is what crossed the wire.
	counted io.ReaderAt
}

// startRangedExport opens the range reader and starts the NBD server,
// which serves small reads from read-ahead windows (iostage.WindowReaderAt).
func startRangedExport(ctx context.Context, r *datasource.RangedURL, wire *iostage.RangeCounter, log *slog.Logger) (*rangedExport, error) {
	return startRangedExportWith(ctx, r, wire, log, true)
}

// startRangedExportWith is startRangedExport, with read-ahead or without
// (to measure it: BenchmarkRangedConvert).
func startRangedExportWith(ctx context.Context, r *datasource.RangedURL, wire *iostage.RangeCounter, log *slog.Logger, readAhead bool) (*rangedExport, error) {
	e := &rangedExport{}
	u, err := nbdserver.ServeUnix(ctx, "importer-nbd-*", "image.sock", "reading the image over HTTP", func(ctx context.Context) (*nbdserver.Server, error) {
		rr, err := r.Open(ctx)
		if err != nil {
			return nil, err
		}
		e.reader = rr
		e.counted = iostage.CountReaderAt(rr, wire)
		served := e.counted
		if readAhead {
			served = iostage.NewWindowReaderAt(e.counted, rr.Size())
		}
		return nbdserver.New(served, rr.Size(), log), nil
	})
	if err != nil {
		return nil, err
	}
	e.unix = u
	return e, nil
}

// spec is the qemu-img filename of the export. "backing": null keeps
// qemu-img from opening any backing file the image might name, even if it
// served a different header to our own check.
func (e *rangedExport) spec() string {
	b, _ := json.Marshal(map[string]any{"backing": nil, "file": e.unix.QemuNode()})
	return "json:" + string(b)
}

// cause prefers the export's own read error over qemu-img's bare
// "Input/output error". Safe on nil (no export).
func (e *rangedExport) cause(err error) error {
	if e == nil {
		return err
	}
	return e.unix.Cause(err)
}

// err is the export's own I/O error (an HTTP read that failed), nil
// while every read was served. Safe on nil.
func (e *rangedExport) err() error {
	if e == nil {
		return nil
	}
	return e.unix.Err()
}

// stop ends the server, aborts reads in flight and removes the socket
// directory. Safe to call more than once and on nil.
func (e *rangedExport) stop(log *slog.Logger) {
	if e == nil {
		return
	}
	e.unix.Stop(log, func() { e.reader.Close() })
}

// startExport serves the remote image, hands the export to in (qemu-img
// reads in.path, its spec) and runs the structural checks qemu-img cannot
// be trusted with on the same bytes.
func (v *validation) startExport(ctx context.Context) error {
	in := v.in
	if in.export == nil {
		e, err := startRangedExport(ctx, v.a.caps.Ranges, &v.a.meter.rangedRead, v.a.log)
		if err != nil {
			return err
		}
		in.export = e
		in.path = e.spec()
	}
	err := format.CheckStructure(in.format, in.export.counted, in.export.reader.Size())
	if err != nil && !errors.Is(err, errdefs.ErrInvalidImage) {
		// A read failure, not a verdict on the image.
		err = fmt.Errorf("checking the %s image over HTTP: %w", in.format, err)
	}
	return err
}
