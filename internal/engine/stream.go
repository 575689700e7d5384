package engine

import (
	"context"
	"fmt"
	"io"

	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/volume"
)

// transferRaw is TransferDataFile on RouteStream, which owns nothing of
// its own: raw data straight onto the target in one pass.
func (a *attempt) transferRaw(ctx context.Context) error {
	n, err := a.copyRaw(ctx, a.target)
	if err != nil {
		return err
	}
	a.result.BytesWritten = n
	a.result.VirtualSize = n
	a.result.DataBytes = a.meter.writer.Load().DataBytes()
	return nil
}

// copyRaw copies the image to a target's sequential writer (the target
// itself, or a scratch file), keeps a fixed VHD footer out of the disk,
// drains and verifies the source, and only then lets the writer put down
// the held-back head of the image.
func (a *attempt) copyRaw(ctx context.Context, t *volume.Target) (int64, error) {
	opts := []volume.WriterOption{volume.WithContext(ctx), volume.WithTargetIsZero(a.targetZeroed && t == a.target)}
	var content *blkhash.Hash
	if t == a.target {
		content = blkhash.New(0)
		opts = append(opts, volume.WithContentHash(content))
	}
	w, err := t.NewWriter(opts...)
	if err != nil {
		return 0, fmt.Errorf("opening %s for writing: %w", t.Path(), err)
	}
	a.meter.writer.Store(w)
	img := a.source.image
	var src io.Reader = img
	var disk *format.RawDiskReader
	if img.Format == format.Raw && a.req.ContentType != ContentTypeAsIs {
		disk = format.NewRawDiskReader(img)
		src = disk
	}
	if _, err := w.ReadFrom(src); err != nil {
		// Source errors name the source and target errors the target; a
		// DMG, known by its trailer, fails here, its head never written.
		return 0, err
	}
	if disk != nil && disk.FooterLeftOut() {
		a.log.Info("Fixed VHD footer found at the end of the stream; it is not part of the disk")
		a.result.SourceFormat = string(format.VHD)
	}
	if err := a.source.drain(a); err != nil {
		return 0, err
	}
	n, err := w.Finish()
	if err != nil {
		return 0, fmt.Errorf("writing image to %s: %w", t.Path(), err)
	}
	if content != nil { // a mismatch below makes Abort wipe the head again
		if err := a.recordContentDigest(content.Sum()); err != nil {
			return 0, err
		}
	}
	return n, nil
}
