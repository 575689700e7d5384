package engine

import (
	"context"
	"fmt"
	"os"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/blkhash"
)

// recordContentDigest puts the digest of the guest-visible bytes written
// (internal/blkhash: the same for one disk in any container) into the
// result, and fails the attempt when Request.ExpectContentDigest names
// another one. The phases call it before Commit, so a mismatch aborts the
// target like any failure.
func (a *attempt) recordContentDigest(d blkhash.Digest) error {
	a.result.ContentDigest = d.String()
	if a.req.ExpectContentDigest == "" {
		a.log.Info("Content digest", "contentDigest", a.result.ContentDigest)
		return nil
	}
	if err := blkhash.Expect(d, a.req.ExpectContentDigest); err != nil {
		return fmt.Errorf("the image from %s: %w", a.req.Source, err)
	}
	a.log.Info("Content digest verified", "contentDigest", a.result.ContentDigest)
	return nil
}

// takeContentDigest records d, or, when the digest could not be had
// (err), fails the import only if one was expected.
func (a *attempt) takeContentDigest(d blkhash.Digest, err error) error {
	if err != nil {
		if a.req.ExpectContentDigest != "" {
			return fmt.Errorf("content digest of %s: %w", a.target.Path(), err)
		}
		a.log.Warn("No content digest of the image written", "target", a.target.Path(), "err", err)
		return nil
	}
	return a.recordContentDigest(d)
}

// convertedContentDigest records the content digest of what qemu-img
// wrote: from the export's hashes on a block target, read back from a raw
// file target (its holes skipped: only the data qemu-img wrote is read;
// the 2 GiB bench disk as a sparse vmdk onto a file, 820 MB of data, cost
// 0.45 s of user and 0.6 s of system CPU more). A qcow2 file target gets
// none. A digest that cannot be had fails the import only when one was
// expected.
func (a *attempt) convertedContentDigest(ctx context.Context, dev *targetExport) error {
	var (
		d   blkhash.Digest
		err error
	)
	switch {
	case dev != nil:
		d, err = dev.hash.Sum(a.result.VirtualSize)
	case a.plan.OutputFormat == "raw":
		var f *os.File
		if f, err = os.Open(a.target.WritePath()); err == nil {
			d, err = blkhash.SumFile(ctx, f, a.result.VirtualSize, 0)
			f.Close()
		}
	default:
		err = fmt.Errorf("a %s target has no content digest: %w", a.plan.OutputFormat, errdefs.ErrInvalidOptions)
	}
	return a.takeContentDigest(d, err)
}
