package engine

import (
	"bufio"
	"context"
	"fmt"
	"os"

	"github.com/diskimport/engine/archive"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/format"
)

// tarHeaderSize is one tar block; "ustar" sits at offset 257 of a POSIX
// (ustar, pax or GNU) header.
const (
	tarHeaderSize = 512
	tarMagicOff   = 257
)

// archiveInfo is Info for the archive content type: the target must be a
// directory, and the source, once decompressed, a tar stream.
func (j *job) archiveInfo(ctx context.Context) (*Plan, error) {
	if j.opts.ContentType != ContentTypeArchive {
		return nil, fmt.Errorf("content type %q: want %s or %s: %w", j.opts.ContentType, ContentTypeKubevirt, ContentTypeArchive, errdefs.ErrInvalidOptions)
	}
	if j.opts.Format == "qcow2" {
		return nil, fmt.Errorf("an archive is extracted into a directory; --format qcow2 does not apply: %w", errdefs.ErrInvalidOptions)
	}
	fi, err := os.Stat(j.opts.Target)
	if err != nil {
		return nil, fmt.Errorf("archive target %s: %w: %v", j.opts.Target, errdefs.ErrInvalidOptions, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("archive target %s is not a directory (an archive is extracted into one): %w", j.opts.Target, errdefs.ErrInvalidOptions)
	}
	j.result.Target = j.opts.Target

	_, img, err := j.openSource(ctx) // source.go
	if err != nil {
		return nil, err
	}
	if img.Format != format.Raw {
		return nil, fmt.Errorf("content type archive wants a tar stream, but %s is a %s image: %w", j.source, img.Format, errdefs.ErrInvalidImage)
	}
	j.result.SourceFormat = "tar"
	plan := &Plan{Route: RouteArchive, SourceFormat: img.Format, Compressions: img.Compressions}
	plan.Phases, plan.SourceDrainedAfter = PhasesFor(RouteArchive, false)
	return plan, nil
}

// transferDataDir extracts the tar stream into a hidden staging directory
// inside the target and verifies the checksums over every byte received;
// Commit then moves the extracted entries into place. On any failure the
// staging directory is removed (cleanup), so nothing of a failed archive
// remains.
func (j *job) transferDataDir(ctx context.Context) error {
	br := bufio.NewReaderSize(j.image, 64<<10)
	head, err := br.Peek(tarHeaderSize)
	if err != nil && len(head) < tarHeaderSize {
		return fmt.Errorf("%s is too short for a tar archive (%d bytes): %w", j.source, len(head), errdefs.ErrInvalidImage)
	}
	if string(head[tarMagicOff:tarMagicOff+5]) != "ustar" && !allZeroBytes(head) {
		return fmt.Errorf("%s is not a tar archive (no ustar magic at offset %d): %w", j.source, tarMagicOff, errdefs.ErrInvalidImage)
	}
	staging, err := archive.NewStaging(j.opts.Target)
	if err != nil {
		return err
	}
	j.staging = staging
	stats, err := archive.Extract(ctx, br, staging, archive.Options{Logger: j.log})
	if err != nil {
		return fmt.Errorf("extracting archive from %s into %s: %w", j.source, j.opts.Target, err)
	}
	if err := j.finishSource(); err != nil {
		return err
	}
	j.result.BytesWritten = stats.Bytes
	j.log.Info("Archive extracted", "target", j.opts.Target, "files", stats.Files, "dirs", stats.Dirs,
		"symlinks", stats.Symlinks, "hardlinks", stats.HardLinks, "bytes", stats.Bytes)
	return nil
}

// commitArchive moves the extracted entries from the staging directory
// into the target and syncs them.
func (j *job) commitArchive(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", errdefs.ErrCancelled, err)
	}
	if err := archive.Commit(j.staging, j.opts.Target); err != nil {
		return err
	}
	j.staging = ""
	j.log.Info("Archive committed and synced", "target", j.opts.Target)
	return nil
}

// removeStaging drops what a failed archive import extracted.
func (j *job) removeStaging() {
	if j.staging == "" {
		return
	}
	if err := os.RemoveAll(j.staging); err != nil {
		j.log.Warn("Removing the partly extracted archive failed", "dir", j.staging, "err", err)
	}
	j.staging = ""
}

func allZeroBytes(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
