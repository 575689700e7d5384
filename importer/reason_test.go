package importer

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/diskimport/engine/errdefs"
)

func TestReasonOneWordPerSentinel(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range reasons {
		assert.False(t, seen[r.word], "reason %s used twice", r.word)
		seen[r.word] = true
		assert.Equal(t, r.word, Reason(fmt.Errorf("wrapped: %w", r.err)))
	}
	assert.Equal(t, "", Reason(nil))
	assert.Equal(t, ReasonFailed, Reason(errors.New("other")))
	assert.Equal(t, "TargetTooSmall", Reason(&errdefs.SizeError{ImageSize: 2, TargetSize: 1}))
	// A source that is not a disk image is named by what it is.
	notImage := fmt.Errorf("reading the header of x: %w", &errdefs.NotImageError{Message: "a bzip2 file, not a disk image", Kind: errdefs.ErrCompressedFile})
	assert.Equal(t, "UnsupportedCompression", Reason(notImage))
	// A checksum mismatch stays one whatever wraps it.
	assert.Equal(t, "ChecksumMismatch", Reason(fmt.Errorf("%w: %w", errdefs.ErrCancelled, errdefs.ErrChecksumMismatch)))
}
