package importer

import (
	"bufio"
	"context"
	"fmt"
	"os"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/archive"
	"github.com/diskimport/engine/internal/format"
	"github.com/diskimport/engine/internal/iostage"
)

// tarHeaderSize is one tar block: a header, or half of the two zero
// blocks that end an archive.
const tarHeaderSize = 512

// archiveInfo is Info for the archive content type: the target must be a
// directory, and the source, once decompressed, a tar stream.
func (a *attempt) archiveInfo(ctx context.Context) (*importPlan, error) {
	if a.req.ContentType != ContentTypeArchive {
		return nil, fmt.Errorf("content type %q: want %s, %s or %s: %w", a.req.ContentType, ContentTypeKubevirt, ContentTypeArchive, ContentTypeAsIs, errdefs.ErrInvalidOptions)
	}
	if a.req.Format == "qcow2" {
		return nil, fmt.Errorf("an archive is extracted into a directory; --format qcow2 does not apply: %w", errdefs.ErrInvalidOptions)
	}
	fi, err := os.Stat(a.req.Target)
	if err != nil {
		return nil, fmt.Errorf("archive target %s: %w: %v", a.req.Target, errdefs.ErrInvalidOptions, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("archive target %s is not a directory (an archive is extracted into one): %w", a.req.Target, errdefs.ErrInvalidOptions)
	}
	a.result.Target = a.req.Target

	if _, err := a.openSource(ctx); err != nil {
		return nil, err
	}
	img := a.source.image
	if img.Format != format.Raw {
		return nil, fmt.Errorf("content type archive wants a tar stream, but %s is a %s image: %w", a.req.Source, img.Format, errdefs.ErrInvalidImage)
	}
	a.result.SourceFormat = "tar"
	return a.choosePlan(a.gatherFacts(ctx, a.sourceFacts())), nil
}

// archiveExtraction is TransferDataDir and, for an archive, Commit. It owns
// the staging directory: TransferDataDir extracts the tar stream into it (a
// hidden directory inside the target) and verifies the checksums over every
// byte received; Commit moves the extracted entries into place. On any
// failure the staging directory is removed, so nothing of a failed archive
// remains.
type archiveExtraction struct {
	a       *attempt
	staging string // "" once committed or removed
}

func (x *archiveExtraction) run(ctx context.Context) error {
	a := x.a
	br := bufio.NewReaderSize(a.source.image, 64<<10)
	head, err := br.Peek(tarHeaderSize)
	if err != nil && len(head) < tarHeaderSize {
		return fmt.Errorf("%s is too short for a tar archive (%d bytes): %w", a.req.Source, len(head), errdefs.ErrInvalidImage)
	}
	if !format.IsTar(head) && !iostage.IsZero(head) {
		return fmt.Errorf("%s is not a tar archive (no ustar magic at offset 257): %w", a.req.Source, errdefs.ErrInvalidImage)
	}
	staging, err := archive.NewStaging(a.req.Target)
	if err != nil {
		return err
	}
	x.staging = staging
	a.stagedArchive = true
	stats, err := archive.Extract(ctx, br, staging, archive.Options{Logger: a.log})
	if err != nil {
		return fmt.Errorf("extracting archive from %s into %s: %w", a.req.Source, a.req.Target, err)
	}
	if err := a.source.drain(a); err != nil {
		return err
	}
	a.result.BytesWritten = stats.Bytes
	a.log.Info("Archive extracted", "target", a.req.Target, "files", stats.Files, "dirs", stats.Dirs,
		"symlinks", stats.Symlinks, "hardlinks", stats.HardLinks, "bytes", stats.Bytes)
	return nil
}

// commit moves the extracted entries from the staging directory into the
// target and syncs them.
func (x *archiveExtraction) commit(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", errdefs.ErrCancelled, err)
	}
	if err := archive.Commit(x.staging, x.a.req.Target); err != nil {
		return err
	}
	x.staging = ""
	x.a.log.Info("Archive committed and synced", "target", x.a.req.Target)
	return nil
}

// removeStaging drops what a failed archive import extracted.
func (x *archiveExtraction) removeStaging() {
	if x.staging == "" {
		return
	}
	if err := os.RemoveAll(x.staging); err != nil {
		x.a.log.Warn("Removing the partly extracted archive failed", "dir", x.staging, "err", err)
	}
	x.staging = ""
}
