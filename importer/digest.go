package importer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/engine"
)

// ResolveDigest returns the manifest digest a container-image reference
// (docker://, oci-archive:, oci:) resolves to, reading no layer: for a
// multi-platform image, the index's digest. A poller (CDI's DataImportCron)
// compares it with the last import to decide whether to import again.
// Only the source fields of o (credentials, TLS, registry settings,
// Logger) are used.
func ResolveDigest(ctx context.Context, source string, o Options) (string, error) {
	if !datasource.IsContainerImageRef(source) {
		return "", fmt.Errorf("%q is not a container image reference (docker://, oci-archive:, oci:): %w", source, errdefs.ErrInvalidOptions)
	}
	c, err := sourceConfig(o)
	if err != nil {
		return "", err
	}
	return datasource.ResolveDigest(ctx, source, c)
}

// ContentDigest returns the content digest of o.Source's disk
// ("blk-sha256:hex", blksum 0.10.1's digest): the guest-visible bytes,
// whatever the container, compression or holes, so one disk as raw,
// qcow2.xz, on a device or in a containerdisk gives one digest, the one an
// import of it records in Result.ContentDigest. Nothing is written: a raw
// file or device is read in place (holes skipped), a raw stream hashed as
// it comes, an image the stream decoder reads decoded into the hash. Only
// what the decoder cannot read in one pass (a sparse vmdk, a qcow2 whose
// clusters come before their tables beyond its buffer) is imported into a
// temporary file in o.ScratchDir (default the system's), removed after.
// The source fields of o are used, and ScratchDir; Target is ignored.
func ContentDigest(ctx context.Context, o Options) (string, error) {
	if o.Source == "" {
		return "", fmt.Errorf("a source is required: %w", errdefs.ErrInvalidOptions)
	}
	src, err := newSource(o)
	if err != nil {
		return "", err
	}
	res, err := engine.ContentDigest(ctx, engine.DigestRequest{Source: src, SpillDir: o.ScratchDir, Logger: o.logger()})
	if err == nil {
		return res.Digest.String(), nil
	}
	if !engine.IsNotStreamable(err) || o.Source == "-" {
		return "", err
	}
	dir, err := os.MkdirTemp(o.ScratchDir, "importer-digest-*")
	if err != nil {
		return "", fmt.Errorf("a temporary file for the digest of %s: %w", o.Source, err)
	}
	defer os.RemoveAll(dir)
	o.Target = filepath.Join(dir, "disk.img")
	o.Format, o.Size, o.Preallocation, o.ExpectContentDigest, o.Verify = "raw", 0, false, "", false
	o.Events, o.Progress = nil, nil
	ir, err := Import(ctx, o)
	if err != nil {
		return "", err
	}
	if ir.ContentDigest == "" {
		return "", fmt.Errorf("the import of %s gave no content digest: %w", o.Source, errdefs.ErrUnsupportedFormat)
	}
	return ir.ContentDigest, nil
}
