package cdi

import (
	"errors"

	"github.com/diskimport/engine/errdefs"
)

// Class is what an import's error means to whoever reads its outcome: the
// exit code of the binary, the status of an upload response. Every
// consumer maps a Class, so the engine's errors are read in one place.
type Class int

const (
	// Succeeded: no error.
	Succeeded Class = iota
	// ChecksumMismatch: the bytes received are not the ones expected.
	// Retrying cannot help, which is why CDI's contract exits 0 for it.
	ChecksumMismatch
	// InvalidOptions: the caller's flags or environment are wrong.
	InvalidOptions
	// BadImage: the image is damaged, unsafe or of a format we refuse.
	BadImage
	// ScratchSpaceRequired: the image needs scratch space and none is usable.
	ScratchSpaceRequired
	// TargetTooSmall: the image does not fit the volume.
	TargetTooSmall
	// SourceFailed: the source could not be reached or refused the image.
	SourceFailed
	// TargetBusy: the block device is mounted or held open.
	TargetBusy
	// Cancelled: the import was stopped (a signal, a client that left).
	Cancelled
	// Failed: any other error.
	Failed
)

// Classify returns the class of an import's error. An error may wrap
// several of the engine's sentinels (a cancelled upload server wraps the
// last attempt's cause); the first class in the order above wins, so a
// checksum mismatch stays one whatever else it is wrapped in.
func Classify(err error) Class {
	switch {
	case err == nil:
		return Succeeded
	case errors.Is(err, errdefs.ErrChecksumMismatch):
		return ChecksumMismatch
	case errors.Is(err, errdefs.ErrInvalidOptions):
		return InvalidOptions
	case errors.Is(err, errdefs.ErrInvalidImage), errors.Is(err, errdefs.ErrUnsafeImage),
		errors.Is(err, errdefs.ErrUnsupportedFormat):
		return BadImage
	case errors.Is(err, errdefs.ErrScratchSpaceRequired):
		return ScratchSpaceRequired
	case errors.Is(err, errdefs.ErrTargetTooSmall):
		return TargetTooSmall
	case errors.Is(err, errdefs.ErrSourceUnreachable), errors.Is(err, errdefs.ErrSourceRefused):
		return SourceFailed
	case errors.Is(err, errdefs.ErrTargetBusy):
		return TargetBusy
	case errors.Is(err, errdefs.ErrCancelled):
		return Cancelled
	}
	return Failed
}
