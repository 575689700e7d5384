package importer

import (
	"bufio"
	"context"
	"fmt"
	"os"

	"github.com/diskimport/engine/archive"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/format"
	"github.com/diskimport/engine/processor"
)

// Content types (Options.ContentType, CDI's IMPORTER_CONTENTTYPE).
const (
	ContentTypeKubevirt = "kubevirt"
	ContentTypeArchive  = "archive"
)

// tarHeaderSize is one tar block; "ustar" sits at offset 257 of a POSIX
// (ustar, pax or GNU) header.
const (
	tarHeaderSize = 512
	tarMagicOff   = 257
)

// archiveInfo is Info for the archive content type: the target must be a
// directory, and the source, once decompressed, a tar stream.
func (j *job) archiveInfo(ctx context.Context) (processor.Phase, error) {
	if j.opts.ContentType != ContentTypeArchive {
		return processor.Error, fmt.Errorf("content type %q: want %s or %s: %w", j.opts.ContentType, ContentTypeKubevirt, ContentTypeArchive, errdefs.ErrInvalidOptions)
	}
	if j.opts.Format == "qcow2" {
		return processor.Error, fmt.Errorf("an archive is extracted into a directory; --format qcow2 does not apply: %w", errdefs.ErrInvalidOptions)
	}
	fi, err := os.Stat(j.opts.Target)
	if err != nil {
		return processor.Error, fmt.Errorf("archive target %s: %w: %v", j.opts.Target, errdefs.ErrInvalidOptions, err)
	}
	if !fi.IsDir() {
		return processor.Error, fmt.Errorf("archive target %s is not a directory (an archive is extracted into one): %w", j.opts.Target, errdefs.ErrInvalidOptions)
	}
	j.result.Target = j.opts.Target

	_, img, err := j.openSource(ctx) // source.go
	if err != nil {
		return processor.Error, err
	}
	if img.Format != format.Raw {
		return processor.Error, fmt.Errorf("content type archive wants a tar stream, but %s is a %s image: %w", j.source, img.Format, errdefs.ErrInvalidImage)
	}
	j.result.SourceFormat = "tar"
	return processor.TransferDataDir, nil
}

// transferDataDir extracts the tar stream into a hidden staging directory
// inside the target, verifies the checksums over every byte received, and
// only then moves the extracted entries into place. On any failure the
// staging directory is removed, so nothing of a failed archive remains.
func (j *job) transferDataDir(ctx context.Context) (processor.Phase, error) {
	br := bufio.NewReaderSize(j.image, 64<<10)
	head, err := br.Peek(tarHeaderSize)
	if err != nil && len(head) < tarHeaderSize {
		return processor.Error, fmt.Errorf("%s is too short for a tar archive (%d bytes): %w", j.source, len(head), errdefs.ErrInvalidImage)
	}
	if string(head[tarMagicOff:tarMagicOff+5]) != "ustar" && !allZeroBytes(head) {
		return processor.Error, fmt.Errorf("%s is not a tar archive (no ustar magic at offset %d): %w", j.source, tarMagicOff, errdefs.ErrInvalidImage)
	}
	staging, err := archive.NewStaging(j.opts.Target)
	if err != nil {
		return processor.Error, err
	}
	committed := false
	defer func() {
		if !committed {
			if err := os.RemoveAll(staging); err != nil {
				j.log.Warn("Removing the partly extracted archive failed", "dir", staging, "err", err)
			}
		}
	}()
	stats, err := archive.Extract(ctx, br, staging, archive.Options{Logger: j.log})
	if err != nil {
		return processor.Error, fmt.Errorf("extracting archive from %s into %s: %w", j.source, j.opts.Target, err)
	}
	if err := j.finishSource(); err != nil {
		return processor.Error, err
	}
	if err := ctx.Err(); err != nil {
		return processor.Error, fmt.Errorf("%w: %w", errdefs.ErrCancelled, err)
	}
	if err := archive.Commit(staging, j.opts.Target); err != nil {
		return processor.Error, err
	}
	committed = true
	j.result.BytesWritten = stats.Bytes
	j.log.Info("Archive extracted and synced", "target", j.opts.Target, "files", stats.Files, "dirs", stats.Dirs,
		"symlinks", stats.Symlinks, "hardlinks", stats.HardLinks, "bytes", stats.Bytes)
	return processor.Complete, nil
}

func allZeroBytes(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
