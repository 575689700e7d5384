package importer

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/errtable"
)

// TestReasonNamesWhatAnImportReturns: the words of the errors an import
// returns (the table itself is internal/errtable's, tested there).
func TestReasonNamesWhatAnImportReturns(t *testing.T) {
	assert.Equal(t, "TargetTooSmall", Reason(&errdefs.SizeError{ImageSize: 2, TargetSize: 1}))
	// A source that is not a disk image is named by what it is.
	notImage := fmt.Errorf("reading the header of x: %w", &errdefs.NotImageError{Message: "a bzip2 file, not a disk image", Kind: errdefs.ErrCompressedFile})
	assert.Equal(t, "UnsupportedCompression", Reason(notImage))
	// A checksum mismatch stays one whatever wraps it.
	assert.Equal(t, "ChecksumMismatch", Reason(fmt.Errorf("%w: %w", errdefs.ErrCancelled, errdefs.ErrChecksumMismatch)))
	assert.Equal(t, ReasonFailed, Reason(fmt.Errorf("x: %w", errdefs.ErrRestart)))
	assert.Equal(t, errtable.ReasonFailed, ReasonFailed, "the table's word")
}
