package cdi

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/importer"
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
	// A source that is not a disk image is named by what it is, and is a
	// bad image to Classify.
	notImage := fmt.Errorf("reading the header of x: %w", &errdefs.NotImageError{Message: "a bzip2 file, not a disk image", Kind: errdefs.ErrCompressedFile})
	assert.Equal(t, "UnsupportedCompression", Reason(notImage))
	assert.Equal(t, BadImage, Classify(notImage))
	// As Classify: a checksum mismatch stays one whatever wraps it.
	assert.Equal(t, "ChecksumMismatch", Reason(fmt.Errorf("%w: %w", errdefs.ErrCancelled, errdefs.ErrChecksumMismatch)))
}

func TestMessageReasonAndHTTPStatus(t *testing.T) {
	err := fmt.Errorf("GET x: %w", &errdefs.HTTPStatusError{URL: "x", StatusCode: 404, Status: "404 Not Found"})
	m := NewTerminationMessage(&importer.Result{}, err)
	assert.Equal(t, "SourceRefused", m.Reason)
	assert.Equal(t, 404, m.HTTPStatus)
	assert.Contains(t, string(m.JSON()), `"reason":"SourceRefused","httpStatus":404`)

	ok := NewTerminationMessage(&importer.Result{Complete: true}, nil)
	assert.NotContains(t, string(ok.JSON()), "reason")
	assert.NotContains(t, string(ok.JSON()), "httpStatus")
	assert.Equal(t, "Cancelled", Reason(fmt.Errorf("%w: %w", errdefs.ErrCancelled, context.Canceled)))
}
