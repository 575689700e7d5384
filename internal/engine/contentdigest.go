package engine

import (
	"fmt"

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
