package importer

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/volume"
)

// transferRaw is TransferDataFile on routeStream, which owns nothing of
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
	runs := a.source.runs
	if t != a.target {
		runs = nil
	}
	if runs != nil {
		if err := a.copyRuns(ctx, w, runs); err != nil {
			return 0, err
		}
	} else if _, err := w.ReadFrom(src); err != nil {
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
		d := content.Sum()
		if runs != nil {
			if err := a.checkRunsDigest(runs, d); err != nil {
				return 0, err
			}
		}
		if err := a.recordContentDigest(d); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// copyRuns writes a source given as runs (datasource.Runs): data as
// bytes, zero runs as lengths (Writer.WriteZeros, neither expanded nor
// scanned), each run checked to start where the last ended and the whole
// to be the size the source declared. Runs that offer their data as a
// reader (datasource.RunsFrom) are read straight into the Writer's chunks.
func (a *attempt) copyRuns(ctx context.Context, w *volume.Writer, runs datasource.Runs) error {
	from, _ := runs.(datasource.RunsFrom)
	for {
		var (
			off, n, zeros int64
			p             []byte
			data          io.Reader
			err           error
		)
		if from != nil {
			off, data, n, zeros, err = from.NextRunFrom(ctx)
		} else {
			off, p, zeros, err = runs.NextRun(ctx)
			n = int64(len(p))
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading %s at %d bytes: %w", a.req.Source, w.Written(), err)
		}
		switch {
		case off != w.Written():
			return fmt.Errorf("%s sent a run at %d where %d bytes were written: %w", a.req.Source, off, w.Written(), errdefs.ErrInvalidImage)
		case n > 0 && data == nil:
			_, err = w.Write(p)
		case n > volume.MaxWriteFrom:
			return fmt.Errorf("%s sent a data run of %d bytes at %d, over %d: %w", a.req.Source, n, off, volume.MaxWriteFrom, errdefs.ErrInvalidImage)
		case n > 0:
			src := &failedReader{r: data}
			if err = w.WriteFrom(src, n); src.err != nil {
				continue // not taken: the runs go on from off (datasource.RunsFrom)
			}
		case zeros > 0:
			err = w.WriteZeros(zeros)
		default:
			return fmt.Errorf("%s sent an empty run at %d: %w", a.req.Source, off, errdefs.ErrInvalidImage)
		}
		if err != nil {
			return err
		}
		a.source.counter.Add(n + zeros)
	}
	if size := a.source.size; size >= 0 && w.Written() != size {
		return fmt.Errorf("%s ended at %d of its %d bytes: %w", a.req.Source, w.Written(), size, errdefs.ErrInvalidImage)
	}
	return nil
}

// failedReader keeps the error its reader failed with.
type failedReader struct {
	r   io.Reader
	err error
}

func (f *failedReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err != nil && !(errors.Is(err, io.EOF) && n == len(p)) {
		f.err = err
	}
	return n, err
}

// checkRunsDigest compares the content digest of the disk written from
// runs with the one their sender computed, before Commit: the two sides
// hashed each byte once, where it passed.
func (a *attempt) checkRunsDigest(runs datasource.Runs, written blkhash.Digest) error {
	sent := runs.Digest()
	if sent == "" {
		return nil
	}
	want, err := blkhash.ParseDigest(sent)
	if err != nil {
		return fmt.Errorf("%s sent a content digest that is none (%q): %w", a.req.Source, sent, errdefs.ErrInvalidImage)
	}
	if want != written {
		return &errdefs.VerifyError{Method: string(verifyBlockHashes), SourceDigest: sent, TargetDigest: written.String(),
			Detail: fmt.Sprintf("%s sent content digest %s, the disk written has %s", a.req.Source, sent, written)}
	}
	a.result.SourceDigest, a.result.TargetDigest = sent, written.String()
	a.result.Verified, a.result.VerifyMethod = true, string(verifyBlockHashes)
	return nil
}
